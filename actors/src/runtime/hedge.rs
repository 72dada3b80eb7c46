//! Hedged first tokens (docs/behaviour.md §5.9): when an attempt has produced no first token
//! after its source's learned p95 time to first token (clamped to a floor and a ceiling), the
//! same request goes to a second source, under the same admission; the first attempt to produce
//! a token wins and the other is cancelled at once.
//!
//! Two parts. The decisions are sans-I/O: [`FirstTokenLatency`] (a decaying log histogram per
//! source, fed by the first tokens of attempts that won or ran alone), [`HedgeBudget`] (a credit
//! of `budget` hedges per attempt sent, so hedges never exceed that share of attempts),
//! [`hedge_delay`] and [`decide`]. The race is [`race`], the one seam into the call driver: the
//! driver hands it the admitted attempt instead of sending it itself, and gets back the attempt
//! that answered (whose source the call machine is told of) and its result.
//!
//! Each racing attempt streams into a proxy sink of its own; the winner's deltas are forwarded
//! to the caller's sink, so the caller sees one answer, and nothing of the loser (which, by
//! definition, had produced no token). The loser is an ordinary cancelled attempt — its future
//! is dropped, so its pacer slot, lease and permit are released with no breaker verdict and no
//! pacer or health observation — whose telemetry row says `hedge_cancelled`.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::ports::transport::EventSink;

use super::labels::HEDGE_OUTCOMES;
use super::metrics::HEDGES_TOTAL;
use super::outcome_counts::OutcomeCounts;

/// How a scope hedges first tokens (`{SCOPE}__HEDGE__*`; off by default).
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::runtime::{HedgeConfig, ScopeConfig};
/// let mut config = ScopeConfig::new("LLM");
/// assert!(!config.hedge.enabled); // opt-in
/// config.hedge = HedgeConfig { enabled: true, floor: Duration::from_millis(100), ..HedgeConfig::default() };
/// // At most one hedge per 20 attempts by default.
/// assert_eq!(config.hedge.budget, 0.05);
/// assert_eq!(config.hedge.ceiling, Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct HedgeConfig {
    /// Hedge at all (`HEDGE__ENABLED`).
    pub enabled: bool,
    /// Never hedge sooner than this after the attempt was sent (`HEDGE__FLOOR_S`).
    pub floor: Duration,
    /// Hedge by then at the latest, and while a source's p95 is not known yet
    /// (`HEDGE__CEILING_S`).
    pub ceiling: Duration,
    /// Hedges per attempt sent, at most (`HEDGE__BUDGET`, 0 to 1).
    pub budget: f64,
}

impl Default for HedgeConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            floor: Duration::from_millis(250),
            ceiling: Duration::from_secs(5),
            budget: 0.05,
        }
    }
}

/// First tokens a source must have shown before its p95 is trusted (else the ceiling is used).
const MIN_SAMPLES: u32 = 20;
/// Buckets per doubling of the latency (each bucket ~19 % wide).
const PER_OCTAVE: f64 = 4.0;
/// Buckets: 1 ms to 2^16 ms (~65 s), anything beyond in the last one.
const BUCKETS: usize = 64;
/// The histogram halves every bucket when it holds this many samples, so it follows a source
/// whose latency moves.
const DECAY_AT: u32 = 1024;

/// A source's time to first token: a decaying log histogram whose p95 is the hedge delay.
///
/// Fed only with the first tokens of attempts that ran alone or won their race: a cancelled
/// attempt is no sample.
#[derive(Debug)]
pub(crate) struct FirstTokenLatency {
    buckets: Mutex<([u32; BUCKETS], u32)>,
}

impl Default for FirstTokenLatency {
    fn default() -> Self {
        Self {
            buckets: Mutex::new(([0; BUCKETS], 0)),
        }
    }
}

impl FirstTokenLatency {
    fn bucket(latency: Duration) -> usize {
        let ms = latency.as_secs_f64() * 1e3;
        if ms <= 1.0 {
            return 0;
        }
        // Truncation intended: the bucket whose lower bound is below the sample.
        let index = (ms.log2() * PER_OCTAVE).floor() as usize + 1;
        index.min(BUCKETS - 1)
    }

    /// The upper bound of bucket `index`.
    fn upper(index: usize) -> Duration {
        Duration::from_secs_f64(2f64.powf(index as f64 / PER_OCTAVE) / 1e3)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ([u32; BUCKETS], u32)> {
        self.buckets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One first token came `latency` after its attempt was sent.
    pub(crate) fn record(&self, latency: Duration) {
        let mut guard = self.lock();
        let (buckets, total) = &mut *guard;
        buckets[Self::bucket(latency)] += 1;
        *total += 1;
        if *total >= DECAY_AT {
            *total = 0;
            for b in buckets.iter_mut() {
                *b /= 2;
                *total += *b;
            }
        }
    }

    /// The 95th percentile (the upper bound of its bucket), once enough samples are known.
    pub(crate) fn p95(&self) -> Option<Duration> {
        let guard = self.lock();
        let (buckets, total) = &*guard;
        if *total < MIN_SAMPLES {
            return None;
        }
        let rank = (f64::from(*total) * 0.95).ceil() as u32;
        let mut seen = 0;
        for (index, count) in buckets.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(Self::upper(index));
            }
        }
        Some(Self::upper(BUCKETS - 1))
    }
}

/// How long an attempt may go without a first token before it is hedged: the source's p95,
/// within `[floor, ceiling]`; the ceiling while the p95 is unknown.
pub(crate) fn hedge_delay(config: &HedgeConfig, p95: Option<Duration>) -> Duration {
    match p95 {
        Some(p95) => p95.clamp(config.floor, config.ceiling.max(config.floor)),
        None => config.ceiling.max(config.floor),
    }
}

/// The hedge budget: each attempt sent earns `budget` of a hedge, a hedge spends one, and the
/// credit never exceeds [`HedgeBudget::MAX_CREDIT`] hedges. It starts empty, so after `n`
/// attempts at most `floor(n × budget)` hedges were ever sent — even on a struggling fleet,
/// hedging adds at most that share of attempts.
#[derive(Debug)]
pub(crate) struct HedgeBudget {
    /// In `UNIT`s per hedge.
    credit: AtomicU64,
    per_attempt: u64,
}

impl HedgeBudget {
    const UNIT: u64 = 1_000_000;
    /// Hedges a quiet period can save up.
    const MAX_CREDIT: u64 = 10 * Self::UNIT;

    pub(crate) fn new(share: f64) -> Self {
        let share = if share.is_finite() {
            share.clamp(0.0, 1.0)
        } else {
            0.0
        };
        Self {
            credit: AtomicU64::new(0),
            // Rounded down: the budget is a ceiling.
            per_attempt: (share * Self::UNIT as f64).floor() as u64,
        }
    }

    /// One attempt was sent.
    pub(crate) fn earn(&self) {
        let per = self.per_attempt;
        let _ = self
            .credit
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                Some((c + per).min(Self::MAX_CREDIT))
            });
    }

    /// Take one hedge's credit; `false` when there is not enough.
    pub(crate) fn try_take(&self) -> bool {
        self.credit
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                c.checked_sub(Self::UNIT)
            })
            .is_ok()
    }

    /// Give back a hedge taken but never sent (no other source could take it).
    pub(crate) fn refund(&self) {
        let _ = self
            .credit
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                Some((c + Self::UNIT).min(Self::MAX_CREDIT))
            });
    }
}

/// Why a due hedge was not sent, or how a sent one ended: the `outcome` label of
/// `pgw_hedges_total`, indexed like [`HEDGE_OUTCOMES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HedgeOutcome {
    /// The hedge produced the first token; the first attempt was cancelled.
    Won = 0,
    /// The first attempt produced its first token first; the hedge was cancelled.
    Lost = 1,
    /// The hedge failed before any token (a failure like any other for its source).
    Failed = 2,
    /// Due, but the budget was spent.
    NoBudget = 3,
    /// Due, but calls of the scope were waiting for capacity.
    CapacityWait = 4,
    /// Due, but no other source was eligible or admission refused it.
    NoSource = 5,
    /// Due, but the call's deadline had passed.
    Deadline = 6,
}

/// Whether a due hedge may be sent now: not while calls wait for capacity (a hedge would take
/// what they wait for), not past the call's deadline, and only within the budget (checked last:
/// a refusal for another reason spends nothing).
pub(crate) fn decide(
    budget: &HedgeBudget,
    room_busy: bool,
    deadline: Option<Instant>,
    now: Instant,
) -> Result<(), HedgeOutcome> {
    if room_busy {
        return Err(HedgeOutcome::CapacityWait);
    }
    if deadline.is_some_and(|d| now >= d) {
        return Err(HedgeOutcome::Deadline);
    }
    if !budget.try_take() {
        return Err(HedgeOutcome::NoBudget);
    }
    Ok(())
}

/// A scope's hedging: its configuration, budget and counters.
#[derive(Debug)]
pub(crate) struct Hedging {
    pub(crate) config: HedgeConfig,
    pub(crate) budget: HedgeBudget,
    outcomes: OutcomeCounts<{ HEDGE_OUTCOMES.len() }>,
}

impl Hedging {
    /// The hedging of scope `scope`, or `None` when it is off.
    pub(crate) fn of(scope: &str, config: &HedgeConfig) -> Option<Self> {
        config.enabled.then(|| Self {
            config: config.clone(),
            budget: HedgeBudget::new(config.budget),
            outcomes: OutcomeCounts::new(HEDGES_TOTAL, scope, &HEDGE_OUTCOMES),
        })
    }

    pub(crate) fn count(&self, outcome: HedgeOutcome) {
        self.outcomes.add(outcome as usize);
    }

    /// How many hedges ended (or were not sent) with each outcome.
    pub(crate) fn counts(&self) -> [(&'static str, u64); HEDGE_OUTCOMES.len()] {
        self.outcomes.counts()
    }
}

/// Events a proxy holds at most (the caller's sink's capacity when there is one).
pub(crate) const PROXY_CAPACITY: usize = 64;

/// One side of a race: an admitted attempt in flight, the proxy its deltas arrive on, and the
/// flag that marks it lost (its guard reads it when the attempt is dropped).
pub(crate) struct Side<F, V> {
    pub(crate) attempt: F,
    pub(crate) events: mpsc::Receiver<V>,
    pub(crate) lost: Arc<AtomicBool>,
}

/// How a race ended.
pub(crate) struct Raced<A> {
    /// The side that answered: 0 the first attempt, 1 the hedge.
    pub(crate) side: usize,
    /// Its answer.
    pub(crate) answer: A,
    /// How long after it was sent the answering side produced its first delta (`None`: it
    /// answered without one, or failed).
    pub(crate) first_token: Option<Duration>,
}

/// What the race saw next.
enum Seen<V, H> {
    /// A side's first event.
    Event(usize, V),
    /// A side's attempt ended (its answer is in `ended`).
    Done(usize),
    /// The hedge is due.
    Due,
    /// The hedge's selection and admission answered: the hedge, or why there is none.
    Opened(Result<H, HedgeOutcome>),
}

/// Hand one delta to the caller (none when the call does not stream); `false` once the caller
/// went away.
async fn forward<V: Send>(events: Option<&EventSink<V>>, event: V) -> bool {
    match events {
        Some(sink) => sink.emit(event).await.is_ok(),
        None => true,
    }
}

/// Race the `primary` attempt against a hedge (see the module docs).
///
/// `due` fires when the hedge is due; `may_hedge` then says whether it may go ([`decide`]) and
/// `open` selects and admits it, answering its side or why there is none (no other source, or
/// the call's deadline passed before admission answered). The first side
/// to produce a delta — or to answer without one (`answered`) — wins: the other is dropped at
/// once, flagged lost, and the winner's deltas are forwarded to `events` until it ends. A side
/// that fails before any delta leaves the other running; when every side failed, the primary's
/// answer is the race's. Outcomes are counted in `hedging`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn race<A, F, V, O, OF>(
    hedging: &Hedging,
    primary: Side<F, V>,
    due: impl Future<Output = ()>,
    may_hedge: impl Fn() -> Result<(), HedgeOutcome>,
    open: O,
    answered: impl Fn(&A) -> bool,
    now: impl Fn() -> Instant,
    events: Option<&EventSink<V>>,
) -> Raced<A>
where
    F: Future<Output = A> + Unpin,
    V: Send,
    O: FnOnce() -> OF,
    OF: Future<Output = Result<Side<F, V>, HedgeOutcome>>,
{
    let mut sent = [now(); 2];
    let mut lost = [Some(primary.lost), None];
    let mut attempts = [Some(primary.attempt), None];
    let mut receivers = [Some(primary.events), None];
    let mut timer = Some(std::pin::pin!(due));
    let mut open = Some(open);
    let mut opening: Option<Pin<Box<OF>>> = None;
    // A side that failed before any delta while the other still ran.
    let mut failed: [Option<A>; 2] = [None, None];
    // A side whose attempt ended, until the race reads it.
    let mut ended: [Option<A>; 2] = [None, None];
    let mut hedged = false;

    // Until one side produces a delta or answers, or every side has failed.
    let (winner, first_event, mut done) = loop {
        let seen = poll_fn(|cx| {
            // Attempts first: a hedge just installed is sent before anything can decide the
            // race (an admitted attempt is never dropped unsent).
            for (side, slot) in attempts.iter_mut().enumerate() {
                if let Some(attempt) = slot.as_mut() {
                    if let Poll::Ready(answer) = Pin::new(attempt).poll(cx) {
                        *slot = None;
                        ended[side] = Some(answer);
                    }
                }
            }
            // A delta sent before its attempt ended is seen before the end.
            for (side, slot) in receivers.iter_mut().enumerate() {
                if let Some(rx) = slot.as_mut() {
                    match rx.poll_recv(cx) {
                        Poll::Ready(Some(event)) => return Poll::Ready(Seen::Event(side, event)),
                        Poll::Ready(None) => *slot = None,
                        Poll::Pending => {}
                    }
                }
            }
            if let Some(side) = ended.iter().position(Option::is_some) {
                return Poll::Ready(Seen::Done(side));
            }
            if let Some(pending) = opening.as_mut() {
                if let Poll::Ready(opened) = pending.as_mut().poll(cx) {
                    opening = None;
                    return Poll::Ready(Seen::Opened(opened));
                }
            }
            if let Some(t) = timer.as_mut() {
                if t.as_mut().poll(cx).is_ready() {
                    timer = None;
                    return Poll::Ready(Seen::Due);
                }
            }
            Poll::Pending
        })
        .await;
        match seen {
            Seen::Event(side, event) => break (side, Some(event), ended[side].take()),
            Seen::Done(side) => {
                let answer = ended[side].take().expect("the side that ended");
                if answered(&answer) {
                    // An answer without deltas (a source that does not stream) wins too.
                    break (side, None, Some(answer));
                }
                if side == 1 {
                    hedging.count(HedgeOutcome::Failed);
                }
                failed[side] = Some(answer);
                // The other side runs on alone: no hedge is due any more.
                timer = None;
            }
            Seen::Due => match may_hedge() {
                Err(skip) => hedging.count(skip),
                Ok(()) => {
                    if let Some(open) = open.take() {
                        opening = Some(Box::pin(open()));
                    }
                }
            },
            Seen::Opened(Err(unopened)) => {
                hedging.budget.refund();
                hedging.count(unopened);
            }
            Seen::Opened(Ok(side)) => {
                sent[1] = now();
                lost[1] = Some(side.lost);
                receivers[1] = Some(side.events);
                attempts[1] = Some(side.attempt);
                hedged = true;
            }
        }
        if attempts.iter().all(Option::is_none)
            && ended.iter().all(Option::is_none)
            && opening.is_none()
        {
            // Every side failed before any delta: the primary's failure is the race's (the
            // hedge's was settled and recorded like any failure of its source).
            let [primary, hedge] = failed;
            let (side, answer) = match (primary, hedge) {
                (Some(answer), _) => (0, answer),
                (None, Some(answer)) => (1, answer),
                (None, None) => unreachable!("a side ended"),
            };
            return Raced {
                side,
                answer,
                first_token: None,
            };
        }
    };
    // The loser is cancelled at once: its future — and with it the guard, pacer slot and
    // permit it holds — is dropped, flagged lost. A hedge still being opened is dropped the
    // same way (its slot and permit go back unused).
    let loser = 1 - winner;
    if attempts[loser].is_some() {
        if let Some(flag) = &lost[loser] {
            flag.store(true, Ordering::Release);
        }
        attempts[loser] = None;
    }
    receivers[loser] = None;
    let [_, failed_hedge] = failed;
    drop((opening, timer));
    // A hedge that failed before the first attempt's first delta was counted then.
    if hedged && failed_hedge.is_none() {
        hedging.count(if winner == 1 {
            HedgeOutcome::Won
        } else {
            HedgeOutcome::Lost
        });
    }
    let first_token = first_event
        .is_some()
        .then(|| now().saturating_duration_since(sent[winner]));
    // The winner's deltas reach the caller, the first one included.
    let mut receiver = receivers[winner].take();
    if let Some(event) = first_event {
        if !forward(events, event).await {
            // The caller went away: the winner's next delta finds nobody listening.
            receiver = None;
        }
    }
    let answer = loop {
        if let Some(answer) = done.take() {
            break answer;
        }
        let Some(attempt) = attempts[winner].as_mut() else {
            unreachable!("the winner runs until it answers");
        };
        let seen = poll_fn(|cx| {
            if let Some(rx) = receiver.as_mut() {
                match rx.poll_recv(cx) {
                    Poll::Ready(Some(event)) => return Poll::Ready(Err(event)),
                    Poll::Ready(None) => receiver = None,
                    Poll::Pending => {}
                }
            }
            Pin::new(&mut *attempt).poll(cx).map(Ok)
        })
        .await;
        match seen {
            Ok(answer) => done = Some(answer),
            Err(event) => {
                if !forward(events, event).await {
                    receiver = None;
                }
            }
        }
    };
    // What the winner sent just before it ended.
    if let Some(mut rx) = receiver {
        while let Ok(event) = rx.try_recv() {
            if !forward(events, event).await {
                break;
            }
        }
    }
    Raced {
        side: winner,
        answer,
        first_token,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_delay_is_the_p95_within_floor_and_ceiling() {
        let config = HedgeConfig {
            enabled: true,
            floor: ms(100),
            ceiling: ms(2_000),
            budget: 0.05,
        };
        // Unknown p95: the ceiling.
        assert_eq!(hedge_delay(&config, None), ms(2_000));
        assert_eq!(hedge_delay(&config, Some(ms(10))), ms(100));
        assert_eq!(hedge_delay(&config, Some(ms(500))), ms(500));
        assert_eq!(hedge_delay(&config, Some(ms(9_000))), ms(2_000));
    }

    #[test]
    fn the_p95_needs_samples_and_follows_the_tail() {
        let latency = FirstTokenLatency::default();
        for _ in 0..MIN_SAMPLES - 1 {
            latency.record(ms(20));
        }
        assert_eq!(latency.p95(), None, "too few samples");
        latency.record(ms(20));
        let p95 = latency.p95().unwrap();
        // Within one bucket (19 %) above the sample.
        assert!(p95 >= ms(20) && p95 <= ms(24), "{p95:?}");
        // 4 % slow samples leave the p95 where it was; 10 % move it to the slow ones.
        for _ in 0..1 {
            latency.record(ms(2_000));
        }
        assert!(latency.p95().unwrap() <= ms(24));
        for _ in 0..3 {
            latency.record(ms(2_000));
        }
        let slow = latency.p95().unwrap();
        assert!(slow >= ms(2_000) && slow <= ms(2_400), "{slow:?}");
    }

    #[test]
    fn the_histogram_decays_so_it_follows_a_source_that_got_faster() {
        let latency = FirstTokenLatency::default();
        for _ in 0..DECAY_AT {
            latency.record(ms(1_000));
        }
        // Halved at DECAY_AT, then halved again by fast samples: slow ones fall under 5 %.
        for _ in 0..(DECAY_AT * 4) {
            latency.record(ms(10));
        }
        assert!(latency.p95().unwrap() <= ms(12), "{:?}", latency.p95());
        // Extremes land in the first and last buckets.
        assert_eq!(FirstTokenLatency::bucket(Duration::ZERO), 0);
        assert_eq!(
            FirstTokenLatency::bucket(Duration::from_secs(3_600)),
            BUCKETS - 1
        );
    }

    #[test]
    fn the_budget_never_exceeds_its_share_of_attempts() {
        let budget = HedgeBudget::new(0.05);
        let mut taken = 0u64;
        for attempt in 1..=10_000u64 {
            budget.earn();
            // Ask for a hedge after every attempt: the budget is the only limit.
            if budget.try_take() {
                taken += 1;
            }
            assert!(
                taken * 20 <= attempt,
                "{taken} hedges after {attempt} attempts"
            );
        }
        assert_eq!(taken, 500);
        // Nothing before 20 attempts: it starts empty.
        let fresh = HedgeBudget::new(0.05);
        for _ in 0..19 {
            fresh.earn();
        }
        assert!(!fresh.try_take());
        fresh.earn();
        assert!(fresh.try_take());
        // A refund gives back what was taken, no more than the cap.
        fresh.refund();
        assert!(fresh.try_take());
        assert!(!fresh.try_take());
        // A quiet period saves up at most MAX_CREDIT hedges.
        let quiet = HedgeBudget::new(1.0);
        for _ in 0..100 {
            quiet.earn();
        }
        let burst = std::iter::from_fn(|| quiet.try_take().then_some(())).count();
        assert_eq!(burst as u64, HedgeBudget::MAX_CREDIT / HedgeBudget::UNIT);
        // Out-of-range shares: none, or one per attempt.
        let none = HedgeBudget::new(f64::NAN);
        none.earn();
        assert!(!none.try_take());
    }

    #[test]
    fn no_hedge_while_calls_wait_past_the_deadline_or_over_budget() {
        let now = Instant::now();
        let budget = HedgeBudget::new(1.0);
        budget.earn();
        assert_eq!(
            decide(&budget, true, None, now),
            Err(HedgeOutcome::CapacityWait)
        );
        assert_eq!(
            decide(&budget, false, Some(now), now),
            Err(HedgeOutcome::Deadline)
        );
        // The refusals above spent nothing.
        assert_eq!(decide(&budget, false, Some(now + ms(1)), now), Ok(()));
        assert_eq!(
            decide(&budget, false, None, now),
            Err(HedgeOutcome::NoBudget)
        );
    }

    #[test]
    fn hedging_is_off_unless_enabled_and_counts_by_outcome() {
        assert!(Hedging::of("LLM", &HedgeConfig::default()).is_none());
        let on = HedgeConfig {
            enabled: true,
            ..HedgeConfig::default()
        };
        let hedging = Hedging::of("LLM", &on).unwrap();
        hedging.count(HedgeOutcome::Won);
        hedging.count(HedgeOutcome::NoSource);
        let counts = hedging.counts();
        assert_eq!(counts[0], ("won", 1));
        assert_eq!(counts[HedgeOutcome::NoSource as usize], ("no_source", 1));
        assert_eq!(counts.iter().map(|(_, n)| n).sum::<u64>(), 2);
    }

    type Answer = Result<&'static str, &'static str>;
    type Attempt = Pin<Box<dyn Future<Output = Answer>>>;

    /// A side that waits `after`, sends `deltas`, then answers.
    fn side(
        after: u64,
        deltas: &'static [u32],
        answer: Answer,
    ) -> (Side<Attempt, u32>, Arc<AtomicBool>) {
        let (sink, events) = EventSink::channel(8);
        let attempt: Attempt = Box::pin(async move {
            tokio::time::sleep(ms(after)).await;
            for delta in deltas {
                let _ = sink.emit(*delta).await;
            }
            answer
        });
        let lost = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&lost);
        (
            Side {
                attempt,
                events,
                lost,
            },
            flag,
        )
    }

    fn hedging() -> Hedging {
        let config = HedgeConfig {
            enabled: true,
            budget: 1.0,
            ..HedgeConfig::default()
        };
        let hedging = Hedging::of("T", &config).unwrap();
        hedging.budget.earn();
        hedging
    }

    fn count(hedging: &Hedging, outcome: HedgeOutcome) -> u64 {
        hedging.counts()[outcome as usize].1
    }

    /// Race `primary` against `hedge` (opened when due after 100 ms), deltas to a caller.
    async fn run_race(
        hedging: &Hedging,
        primary: Side<Attempt, u32>,
        hedge: Option<Side<Attempt, u32>>,
        may: Result<(), HedgeOutcome>,
    ) -> (Raced<Answer>, Vec<u32>, bool) {
        let (sink, mut caller) = EventSink::channel(16);
        let opened = std::cell::Cell::new(false);
        let raced = race(
            hedging,
            primary,
            tokio::time::sleep(ms(100)),
            || may,
            || {
                opened.set(true);
                async move { hedge.ok_or(HedgeOutcome::NoSource) }
            },
            Answer::is_ok,
            // The paused clock's now, as the scope's `Clock` follows it.
            || tokio::time::Instant::now().into_std(),
            Some(&sink),
        )
        .await;
        drop(sink);
        let mut seen = Vec::new();
        while let Some(delta) = caller.recv().await {
            seen.push(delta);
        }
        (raced, seen, opened.get())
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_delta_wins_and_only_the_winner_reaches_the_caller() {
        let hedging = hedging();
        let (primary, primary_lost) = side(1_000, &[1, 2], Ok("primary"));
        let (hedge, hedge_lost) = side(10, &[7, 8, 9], Ok("hedge"));
        let (raced, seen, opened) = run_race(&hedging, primary, Some(hedge), Ok(())).await;
        assert!(opened);
        assert_eq!((raced.side, raced.answer), (1, Ok("hedge")));
        assert_eq!(seen, [7, 8, 9]);
        // The hedge's first delta came 10 ms after it was sent.
        assert_eq!(raced.first_token, Some(ms(10)));
        assert!(primary_lost.load(Ordering::Acquire), "the loser is flagged");
        assert!(!hedge_lost.load(Ordering::Acquire));
        assert_eq!(count(&hedging, HedgeOutcome::Won), 1);
        assert_eq!(hedging.counts().iter().map(|(_, n)| n).sum::<u64>(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hedge_that_fails_leaves_the_primary_to_win_and_is_counted_failed() {
        let hedging = hedging();
        let (primary, primary_lost) = side(1_000, &[1, 2], Ok("primary"));
        let (hedge, _) = side(10, &[], Err("503"));
        let (raced, seen, _) = run_race(&hedging, primary, Some(hedge), Ok(())).await;
        assert_eq!((raced.side, raced.answer), (0, Ok("primary")));
        assert_eq!(seen, [1, 2]);
        assert!(!primary_lost.load(Ordering::Acquire));
        assert_eq!(count(&hedging, HedgeOutcome::Failed), 1);
        assert_eq!(
            count(&hedging, HedgeOutcome::Lost),
            0,
            "counted once, as failed"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_primary_winning_first_cancels_the_hedge_and_both_failing_answers_the_primary() {
        let hedging = hedging();
        let (primary, _) = side(300, &[1], Ok("primary"));
        let (hedge, hedge_lost) = side(1_000, &[7], Ok("hedge"));
        let (raced, seen, _) = run_race(&hedging, primary, Some(hedge), Ok(())).await;
        assert_eq!((raced.side, seen), (0, vec![1]));
        assert!(hedge_lost.load(Ordering::Acquire));
        assert_eq!(count(&hedging, HedgeOutcome::Lost), 1);

        let (primary, _) = side(300, &[], Err("primary 503"));
        let (hedge, _) = side(400, &[], Err("hedge 503"));
        let (raced, seen, _) = run_race(&hedging, primary, Some(hedge), Ok(())).await;
        assert_eq!(
            (raced.side, raced.answer, raced.first_token),
            (0, Err("primary 503"), None)
        );
        assert!(seen.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn no_hedge_is_opened_before_it_is_due_or_when_it_may_not_go() {
        // The primary answers (or fails) before the hedge is due: nothing is opened.
        let hedging = hedging();
        let (primary, _) = side(50, &[], Err("early 503"));
        let (raced, _, opened) = run_race(&hedging, primary, None, Ok(())).await;
        assert_eq!(
            (raced.side, raced.answer, opened),
            (0, Err("early 503"), false)
        );
        // Due, but refused (budget, capacity wait, deadline): counted, not opened.
        let (primary, _) = side(500, &[1], Ok("primary"));
        let (raced, _, opened) =
            run_race(&hedging, primary, None, Err(HedgeOutcome::CapacityWait)).await;
        assert_eq!((raced.side, opened), (0, false));
        assert_eq!(count(&hedging, HedgeOutcome::CapacityWait), 1);
        // Due and allowed, but no other source: the budget taken for it is given back.
        let (primary, _) = side(500, &[1], Ok("primary"));
        assert!(hedging.budget.try_take());
        let (raced, _, opened) = run_race(&hedging, primary, None, Ok(())).await;
        assert_eq!((raced.side, opened), (0, true));
        assert_eq!(count(&hedging, HedgeOutcome::NoSource), 1);
        assert!(hedging.budget.try_take(), "refunded");
    }
}
