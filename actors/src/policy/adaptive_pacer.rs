//! The default pacer (`PACER=adaptive`): open until the first sign of strain, then additive
//! increase with a Little's-law decrease on pushback (429 or rate-limit headers) and on queueing
//! (latency above its baseline, in the spirit of Vegas / Gradient2).
//!
//! Why each part:
//! - **Open start** ([`AdaptivePacer::open`], the default): until the source shows strain, its
//!   limit is the configured ceiling, or none, so no call waits for a pacer that has learned
//!   nothing yet. Slow start from 16 needed five round trips to admit 256 callers — minutes of
//!   queueing after every deploy when a round trip is a 5–30 s LLM call — against an upstream
//!   that was never strained. The first signal closes it: the cut starts from what was really
//!   in flight (the peak of the current and the previous round), not from the open limit, so it
//!   lands where the source was when it pushed back.
//! - **Slow start** (with `PACER__START`) (+2 per success, so the limit triples every round trip) keeps the cold-start
//!   protection of a small start without the cost: 16 → 500 takes about three round trips, not
//!   hours. Tripling rather than TCP's doubling because a round trip here is a whole LLM call
//!   (seconds): the overshoot it risks is undone by the first signal's cut within a few rounds.
//! - **No hidden ceiling**: the only ceiling is the configured one; growth is bounded instead by
//!   use — the limit grows only while at least half of it is in flight.
//! - **Rounds**: latency and success rate are judged per round (one recent latency long), not
//!   per sample, so one slow answer or a CPU hiccup on a busy host is not mistaken for a queue.
//!   Slow start ends only when a round is twice the baseline (a real queue doubles latency when
//!   the limit doubles; a busy loopback host adds far less); afterwards 1.25× counts as queueing.
//! - **Spread is not a queue**: LLM answers take 1 s or 20 s by their length, whatever the load.
//!   Three rules keep that from reading as queueing (without them 32 callers on an upstream
//!   answering in 1–20 s got 0.155 of what it would serve, `examples/pacer_noise`):
//!   - a round is judged only from three successes, and its mean must clear the threshold by
//!     three standard errors of its own latencies;
//!   - the baseline window is at least eight rounds, so long answers do not make it forget;
//!   - a run of queueing cuts is tested: a queue of ours shrinks with what we send, so once the
//!     cuts took the limit to ¾ or less, the first round wholly after them (two rounds after the
//!     first cut: the excess drains, then the first attempts sent after it come back) must show
//!     latency lower by three standard errors of the difference. If it does not, the baseline
//!     was too low (a cold burst's first answers are its quickest): it starts again from that
//!     round, and the limit grows back to where the cuts began at slow start's pace.
//! - **Little's law on a signal**: the new limit is `rate × latency` — the success rate measured
//!   in the last round (or, better, the refill rate the rate-limit headers state) times the
//!   latency. For a queueing server the baseline latency is used, which lands on exactly the
//!   number it serves at once; for a rate limit the current latency, which lands on the rate it
//!   admits. The cut is clamped to `[×0.5, ×0.95]` (never more than AIMD's halving, always a real
//!   cut) and happens at most once per round, so a burst of 429s from one overshoot is one cut.
//! - **`Retry-After`** freezes growth until it passes; it does not stop the source. Each refused
//!   call already waits at least `Retry-After` before its own retry (the backoff honours it);
//!   stopping all traffic for the hint's full second on every burst would halve the goodput of
//!   a source that limits per second while it still admits most requests.
//!
//! Not for: token quotas (the TPM gate), failures (the breaker).

use std::time::{Duration, Instant};

use crate::outcome::AttemptVerdict;

use super::pacer::{Pacer, PacerObservation, PacerSignal, RateLimitHint};

/// Limit added per success during slow start (the limit triples per round trip).
const SLOW_START_GAIN: f64 = 2.0;

/// Round latency / baseline above which slow start ends.
const SLOW_START_EXIT: f64 = 2.0;
/// Round latency / baseline above which, after slow start, the upstream is taken to queue.
const QUEUE_TOLERANCE: f64 = 1.25;
/// Bounds of one cut, as fractions of the current limit.
const DEEPEST_CUT: f64 = 0.5;
const SHALLOWEST_CUT: f64 = 0.95;
/// The latency baseline is the lowest round mean over the last one to two of these windows, so
/// it follows an upstream that really got slower.
const BASELINE_WINDOW: Duration = Duration::from_secs(30);
/// … and never fewer rounds than this: with answers of 10–30 s, 30 s is one round, and a baseline
/// that remembered one round would follow every queue up.
const BASELINE_ROUNDS: u32 = 8;
/// A round is judged (a baseline candidate, a queueing verdict) only with at least this many
/// successes: at low concurrency a round holds one or two answers, and the spread of answers
/// drawn independently of load (an LLM answer takes 1 s or 20 s by its length) would read as a
/// queue. Below three answers in flight a queueing cut has little left to cut anyway.
const JUDGED_SUCCESSES: u32 = 3;
/// A round's mean reads as queueing only when it clears the threshold by this many standard
/// errors of its own samples: a queue moves every answer, spread moves the mean by chance.
const SPREAD_MARGIN: f64 = 3.0;
/// Queueing cuts that took the limit to this share of where they started, or lower, are tested:
/// the first round wholly after them must show latency come down (a queue of ours shrinks with
/// what we send), or they are undone and the baseline starts again. Shallower cuts move latency
/// less than answers vary.
const CHECKED_CUT: f64 = 0.75;
/// Queueing delay below this is a busy host's scheduler, not an upstream's queue: it never
/// counts (fast upstreams answer in milliseconds, where scheduling jitter alone triples latency).
const JITTER_ALLOWANCE: Duration = Duration::from_millis(20);
/// Round length bounds.
const MIN_ROUND: Duration = Duration::from_millis(10);
const MAX_ROUND: Duration = Duration::from_secs(30);
/// Headers saying less than this share of the bucket remains are a signal (before any 429).
const QUOTA_LOW_SHARE: f64 = 0.1;

/// Slow start, then AIMD with a Little's-law decrease on 429, on nearly spent rate-limit
/// headers and on queueing latency. See the module docs for the reasoning.
///
/// ```
/// use std::time::{Duration, Instant};
/// use polygateway_actors::policy::adaptive_pacer::AdaptivePacer;
/// use polygateway_actors::policy::pacer::{Pacer, PacerObservation, PacerSignal};
/// use polygateway_actors::AttemptVerdict;
///
/// let mut p = AdaptivePacer::new(8, 0);
/// let t0 = Instant::now();
/// // Eight successes at 200 ms with the limit in use: slow start adds two per success.
/// for i in 0..8 {
///     p.observe(&PacerObservation {
///         latency: Duration::from_millis(200),
///         in_flight: p.limit(),
///         ..PacerObservation::new(AttemptVerdict::Success, t0 + Duration::from_millis(200 + i))
///     });
/// }
/// assert_eq!(p.limit(), 24);
/// // A 429: the limit is cut, but by at most half.
/// p.observe(&PacerObservation::new(AttemptVerdict::RateLimited, t0 + Duration::from_millis(400)));
/// assert!((12..24).contains(&p.limit()));
/// assert_eq!(p.last_signal(), PacerSignal::RateLimited);
/// ```
#[derive(Debug, Clone)]
pub struct AdaptivePacer {
    limit: f64,
    ceiling: f64,
    /// No sign of strain yet: the limit is the ceiling, and the in-flight peak stands in for it
    /// when the first signal arrives.
    open: bool,
    /// The most attempts in flight reported in the previous round (the current round's is in
    /// `round`).
    previous_peak: u32,
    slow_start: bool,
    round: Option<Round>,
    /// Mean latency of the last complete round with successes.
    recent: Option<Duration>,
    /// Successes per second in the last complete round.
    success_rate: f64,
    baseline: WindowedMin,
    /// Refill rate the rate-limit headers last stated.
    header_rate: Option<f64>,
    no_increase_until: Option<Instant>,
    no_cut_until: Option<Instant>,
    /// The first of a run of queueing cuts, until the first round wholly after it tests
    /// whether latency followed the run down.
    queueing_cut: Option<QueueingCut>,
    /// Queueing cuts latency did not follow: the limit they started from, regained at slow
    /// start's pace.
    regrow_to: Option<f64>,
    signal: PacerSignal,
}

impl AdaptivePacer {
    /// A pacer starting at `start` (≥ 1) under `ceiling` (0 = none: the pacer finds the limit;
    /// the source's `MAX_CONCURRENCY`, when set, is a hard cap).
    ///
    /// ```
    /// use polygateway_actors::policy::adaptive_pacer::AdaptivePacer;
    /// use polygateway_actors::policy::pacer::Pacer;
    /// assert_eq!(AdaptivePacer::new(8, 0).ceiling(), None);
    /// assert_eq!(AdaptivePacer::new(32, 16).limit(), 16);
    /// ```
    pub fn new(start: u32, ceiling: u32) -> Self {
        let ceiling = if ceiling == 0 {
            f64::from(u32::MAX)
        } else {
            f64::from(ceiling)
        };
        Self {
            limit: f64::from(start.max(1)).min(ceiling),
            ceiling,
            open: false,
            previous_peak: 0,
            slow_start: true,
            round: None,
            recent: None,
            success_rate: 0.0,
            baseline: WindowedMin::default(),
            header_rate: None,
            no_increase_until: None,
            no_cut_until: None,
            queueing_cut: None,
            regrow_to: None,
            signal: PacerSignal::None,
        }
    }

    /// A pacer that starts open: its limit is `ceiling` (0 = none) until the source shows strain
    /// — a 429, nearly spent rate-limit headers, latency rising over its baseline — and the
    /// first such signal cuts it from the number of attempts actually in flight. The default
    /// when `PACER__START` is not set.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use polygateway_actors::policy::adaptive_pacer::AdaptivePacer;
    /// use polygateway_actors::policy::pacer::{Pacer, PacerObservation};
    /// use polygateway_actors::AttemptVerdict;
    ///
    /// let mut p = AdaptivePacer::open(0);
    /// assert_eq!(p.limit(), u32::MAX); // nothing waits for it
    /// assert!(p.is_open());
    /// let t0 = Instant::now();
    /// // 300 calls in flight, then the upstream refuses one: the cut starts from the 300.
    /// p.observe(&PacerObservation {
    ///     latency: Duration::from_millis(800),
    ///     in_flight: 300,
    ///     ..PacerObservation::new(AttemptVerdict::Success, t0)
    /// });
    /// p.observe(&PacerObservation {
    ///     in_flight: 300,
    ///     ..PacerObservation::new(AttemptVerdict::RateLimited, t0 + Duration::from_millis(5))
    /// });
    /// assert!(!p.is_open());
    /// assert!((150..=285).contains(&p.limit()), "{}", p.limit());
    /// // With a ceiling, open means the ceiling.
    /// assert_eq!(AdaptivePacer::open(64).limit(), 64);
    /// ```
    pub fn open(ceiling: u32) -> Self {
        let mut pacer = Self::new(u32::MAX, ceiling);
        pacer.open = true;
        pacer
    }

    /// `true` until the first sign of strain of a pacer that started [open](Self::open).
    ///
    /// ```
    /// use polygateway_actors::policy::adaptive_pacer::AdaptivePacer;
    /// assert!(!AdaptivePacer::new(8, 0).is_open());
    /// ```
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// The ceiling, `None` when there is none.
    ///
    /// ```
    /// use polygateway_actors::policy::adaptive_pacer::AdaptivePacer;
    /// assert_eq!(AdaptivePacer::new(8, 500).ceiling(), Some(500));
    /// ```
    pub fn ceiling(&self) -> Option<u32> {
        (self.ceiling < f64::from(u32::MAX)).then_some(self.ceiling as u32)
    }

    /// `true` until the first pushback or sign of queueing (what the tests read).
    #[cfg(test)]
    fn in_slow_start(&self) -> bool {
        self.slow_start
    }

    /// The lowest round latency seen lately (the queueing baseline; what the tests read).
    #[cfg(test)]
    fn baseline(&self) -> Option<Duration> {
        self.baseline.value()
    }

    fn close_round_if_due(&mut self, now: Instant, success_latency: Option<Duration>) {
        // A round is one recent latency long, fixed when it starts. Before any round closed,
        // the first success's latency sets it: under a cold burst the first answers are the
        // unqueued ones, and a length that followed later, queued answers would stretch the
        // first round over the whole queue and take the queue for the baseline. (A refusal's
        // latency says nothing about the round trip.)
        let recent = self.recent;
        let round = self
            .round
            .get_or_insert_with(|| Round::starting(now, recent));
        if round.length.is_none() {
            round.length = success_latency.map(|l| l.clamp(MIN_ROUND, MAX_ROUND));
        }
        let Some(length) = round.length else { return };
        let elapsed = now.saturating_duration_since(round.start);
        if elapsed < length {
            return;
        }
        let next = round.mean().or(recent);
        let done = std::mem::replace(round, Round::starting(now, next));
        self.previous_peak = done.peak_in_flight;
        self.success_rate = f64::from(done.successes) / elapsed.as_secs_f64();
        let Some(mean) = done.mean() else { return };
        self.recent = Some(mean);
        if done.successes < JUDGED_SUCCESSES {
            return;
        }
        let window = BASELINE_WINDOW.max(elapsed * BASELINE_ROUNDS);
        self.baseline.observe(mean, now, window);
        let Some(baseline) = self.baseline.value() else {
            return;
        };
        let threshold = if self.slow_start {
            SLOW_START_EXIT
        } else {
            QUEUE_TOLERANCE
        };
        let error = done.standard_error();
        let queueing =
            mean > baseline.mul_f64(threshold) + JITTER_ALLOWANCE + error.mul_f64(SPREAD_MARGIN);
        let tested = self
            .queueing_cut
            .take_if(|first| done.start >= first.effective_from);
        if let Some(first) = tested {
            // The first round wholly after the first cut of a run of queueing cuts is their
            // test, once they took the limit down far enough to show: a queue of ours
            // shrinks with what we send.
            let deep = self.limit <= first.from * CHECKED_CUT;
            let difference_error = error.as_secs_f64().hypot(first.error.as_secs_f64());
            let fell =
                mean + Duration::from_secs_f64(difference_error * SPREAD_MARGIN) < first.mean;
            if queueing && deep && !fell {
                // Still above the baseline, yet latency did not come down with the limit: not
                // a queue of ours (answers whose length varies, or somebody else's load), and
                // the baseline was too low. Start it again from this round, and go back to
                // where the cuts started from at slow start's pace.
                self.baseline.restart(mean, now);
                self.regrow_to = Some(first.from);
                return;
            }
        }
        if !queueing {
            return;
        }
        // What the server does at once, at its unqueued speed.
        let target = self.success_rate * baseline.as_secs_f64();
        if let Some(from) = self.cut(PacerSignal::Queueing, target, SHALLOWEST_CUT, now) {
            if self.queueing_cut.is_none() {
                self.queueing_cut = Some(QueueingCut {
                    from,
                    mean,
                    error,
                    effective_from: self.round_from(self.round_from(now)),
                });
            }
        }
    }

    /// Little's law for a rate limit: the admitted rate times the current latency.
    fn rate_target(&self) -> f64 {
        let rate = self.header_rate.unwrap_or(self.success_rate);
        rate * self.recent.map_or(0.0, |d| d.as_secs_f64())
    }

    /// One round from `now`.
    fn round_from(&self, now: Instant) -> Instant {
        // Before any round closed, the first round's length (its first success's latency)
        // is the best guess: answers to attempts sent before a cut keep arriving for that long.
        let length = self
            .recent
            .or_else(|| self.round.as_ref().and_then(|r| r.length))
            .unwrap_or(MIN_ROUND);
        now + length.clamp(MIN_ROUND, MAX_ROUND)
    }

    /// Cut towards `target`, keeping at most `keep` of the limit; the limit it cut from, if it
    /// cut (at most once per round).
    fn cut(&mut self, signal: PacerSignal, target: f64, keep: f64, now: Instant) -> Option<f64> {
        if self.open {
            // The open limit was never in use: what was in flight is where the source stood
            // when it pushed back, and the cut is relative to that.
            self.open = false;
            let in_use = self
                .round
                .as_ref()
                .map_or(0, |r| r.peak_in_flight)
                .max(self.previous_peak);
            self.limit = f64::from(in_use).clamp(1.0, self.ceiling);
        }
        self.signal = signal;
        self.slow_start = false;
        if self.no_cut_until.is_some_and(|t| now < t) {
            return None;
        }
        // Pushback is the source's own word: the queueing cuts before it are not tested, and a
        // regrowth stops at any new cut.
        if signal != PacerSignal::Queueing {
            self.queueing_cut = None;
        }
        self.regrow_to = None;
        let from = self.limit;
        let target = if target.is_finite() { target } else { 0.0 };
        self.limit = target
            .clamp(self.limit * DEEPEST_CUT, self.limit * keep)
            .max(1.0);
        // Answers to attempts sent before this cut still arrive for one round: one cut per round.
        self.no_cut_until = Some(self.round_from(now));
        Some(from)
    }

    fn read_headers(&mut self, hint: &RateLimitHint, now: Instant) {
        if let Some(rate) = hint.refill_per_s() {
            self.header_rate = Some(rate);
        }
        let Some(remaining) = hint.remaining else {
            return;
        };
        let low = match hint.limit {
            Some(limit) => (remaining as f64) < limit as f64 * QUOTA_LOW_SHARE,
            None => remaining == 0,
        };
        if low {
            // Nearly spent but not refused yet: down to what the refill sustains, never up,
            // and no growth for a round.
            let target = self.rate_target();
            let _ = self.cut(PacerSignal::QuotaLow, target, 1.0, now);
            self.no_increase_until = Some(
                self.round_from(now)
                    .max(self.no_increase_until.unwrap_or(now)),
            );
        }
    }

    fn grow(&mut self, attempt: &PacerObservation) {
        if self.no_increase_until.is_some_and(|t| attempt.now < t) {
            return;
        }
        // Only a limit in use is evidence: an idle source must not drift towards infinity.
        if f64::from(attempt.in_flight) * 2.0 < self.limit {
            return;
        }
        let step = match self.regrow_to {
            _ if self.slow_start => SLOW_START_GAIN,
            // Back to where an untested cut started, then additive increase as before it.
            Some(to) if self.limit < to => SLOW_START_GAIN.min(to - self.limit),
            _ => 1.0 / self.limit,
        };
        self.limit = (self.limit + step).min(self.ceiling);
        if self.regrow_to.is_some_and(|to| self.limit >= to) {
            self.regrow_to = None;
        }
    }
}

impl Pacer for AdaptivePacer {
    fn limit(&self) -> u32 {
        self.limit as u32
    }

    fn observe(&mut self, attempt: &PacerObservation) {
        let now = attempt.now;
        let success = attempt.verdict == AttemptVerdict::Success;
        self.close_round_if_due(now, success.then_some(attempt.latency));
        if let Some(round) = &mut self.round {
            round.peak_in_flight = round.peak_in_flight.max(attempt.in_flight);
        }
        if let Some(hint) = &attempt.rate_limit {
            self.read_headers(hint, now);
        }
        match attempt.verdict {
            AttemptVerdict::Success => {
                if let Some(round) = &mut self.round {
                    round.successes += 1;
                    round.latency_sum += attempt.latency;
                    round.latency_squares += attempt.latency.as_secs_f64().powi(2);
                }
                self.grow(attempt);
            }
            AttemptVerdict::RateLimited => {
                if let Some(wait) = attempt.retry_after {
                    let until = now + wait;
                    self.no_increase_until =
                        Some(self.no_increase_until.map_or(until, |t| t.max(until)));
                }
                let target = self.rate_target();
                let _ = self.cut(PacerSignal::RateLimited, target, SHALLOWEST_CUT, now);
            }
            AttemptVerdict::AliveButUnusable | AttemptVerdict::Failure | AttemptVerdict::Dead => {}
        }
    }

    fn mode(&self) -> &'static str {
        "adaptive"
    }

    fn last_signal(&self) -> PacerSignal {
        self.signal
    }
}

/// Successes and their latencies within one round.
#[derive(Debug, Clone)]
struct Round {
    start: Instant,
    /// How long the round lasts: one recent latency, decided when it starts (or by its first
    /// success, before any round closed).
    length: Option<Duration>,
    successes: u32,
    latency_sum: Duration,
    /// Σ latency² in seconds², for the spread of the round's latencies.
    latency_squares: f64,
    /// The most attempts in flight any observation of the round reported.
    peak_in_flight: u32,
}

impl Round {
    fn starting(start: Instant, length: Option<Duration>) -> Self {
        Self {
            start,
            length: length.map(|l| l.clamp(MIN_ROUND, MAX_ROUND)),
            successes: 0,
            latency_sum: Duration::ZERO,
            latency_squares: 0.0,
            peak_in_flight: 0,
        }
    }

    fn mean(&self) -> Option<Duration> {
        (self.successes > 0).then(|| self.latency_sum / self.successes)
    }

    /// The standard error of the round's mean latency (zero below two successes).
    fn standard_error(&self) -> Duration {
        let n = f64::from(self.successes);
        if n < 2.0 {
            return Duration::ZERO;
        }
        let mean = self.latency_sum.as_secs_f64() / n;
        let variance = ((self.latency_squares - n * mean * mean) / (n - 1.0)).max(0.0);
        Duration::from_secs_f64((variance / n).sqrt())
    }
}

/// The first queueing cut of a run, as the round that caused it saw latency.
#[derive(Debug, Clone, Copy)]
struct QueueingCut {
    /// The limit before the cut.
    from: f64,
    mean: Duration,
    error: Duration,
    /// The first round starting from here holds no answer to an attempt sent before the cut:
    /// two rounds after it — the excess in flight drains (up to half a round for a cut to half,
    /// no new attempt is sent meanwhile), then the first attempts sent after it come back.
    effective_from: Instant,
}

/// The minimum over the current and the previous window.
#[derive(Debug, Clone, Default)]
struct WindowedMin {
    window_start: Option<Instant>,
    current: Option<Duration>,
    previous: Option<Duration>,
}

impl WindowedMin {
    fn observe(&mut self, sample: Duration, now: Instant, window: Duration) {
        let start = *self.window_start.get_or_insert(now);
        if now.saturating_duration_since(start) >= window {
            self.previous = self.current.take();
            self.window_start = Some(now);
        }
        self.current = Some(self.current.map_or(sample, |c| c.min(sample)));
    }

    /// Forget every sample: `sample` at `now` is the only one.
    fn restart(&mut self, sample: Duration, now: Instant) {
        *self = Self {
            window_start: Some(now),
            current: Some(sample),
            previous: None,
        };
    }

    fn value(&self) -> Option<Duration> {
        match (self.current, self.previous) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A modelled upstream: for a limit, the round's latency, successes, refusals and headers.
    type Upstream = dyn Fn(u32) -> (Duration, u32, u32, Option<RateLimitHint>);

    /// Drives a pacer against a modelled upstream in virtual time: each round, `limit` attempts
    /// finish, spread evenly over one latency.
    struct Sim {
        pacer: AdaptivePacer,
        now: Instant,
        /// Callers: at most this many attempts are in flight, whatever the limit.
        demand: u32,
    }

    impl Sim {
        fn new(start: u32, ceiling: u32) -> Self {
            Self {
                pacer: AdaptivePacer::new(start, ceiling),
                now: Instant::now(),
                demand: u32::MAX,
            }
        }

        /// An open pacer under `demand` callers.
        fn open(ceiling: u32, demand: u32) -> Self {
            Self {
                pacer: AdaptivePacer::open(ceiling),
                now: Instant::now(),
                demand,
            }
        }

        /// One round: `answer(in flight)` gives the latency, the verdicts and optional headers.
        fn round(&mut self, answer: &Upstream) -> u32 {
            let limit = self.pacer.limit().min(self.demand);
            let (latency, ok, refused, hint) = answer(limit);
            let n = ok + refused;
            let step = latency / n.max(1);
            for i in 0..n {
                self.now += step;
                // Refusals spread evenly through the round.
                let verdict = if (i * refused) / n != ((i + 1) * refused) / n {
                    AttemptVerdict::RateLimited
                } else {
                    AttemptVerdict::Success
                };
                self.pacer.observe(&PacerObservation {
                    verdict,
                    now: self.now,
                    latency: if verdict == AttemptVerdict::Success {
                        latency
                    } else {
                        MS
                    },
                    // Demand fills every slot the pacer opens, as in a batch job.
                    in_flight: self.pacer.limit().min(self.demand),
                    retry_after: (verdict == AttemptVerdict::RateLimited)
                        .then_some(Duration::from_secs(1)),
                    rate_limit: hint,
                });
            }
            self.pacer.limit()
        }
    }

    /// A server that serves `slots` at once in `service` and queues the rest.
    fn queueing(slots: u32, service: Duration) -> Box<Upstream> {
        Box::new(move |limit| {
            // Steady FIFO with `slots` servers: throughput slots/service, so latency grows with
            // the number waiting (Little's law).
            let latency = service.mul_f64((f64::from(limit) / f64::from(slots)).max(1.0));
            (latency, limit, 0, None)
        })
    }

    /// A FIFO server as a cold burst meets it: in the first round only the first `slots`
    /// answers come back, at the bare service time; from then on every answer has waited its
    /// turn (`queueing`).
    fn cold_queueing(slots: u32, service: Duration) -> Box<Upstream> {
        let first = std::cell::Cell::new(true);
        let warm = queueing(slots, service);
        Box::new(move |limit| {
            if first.replace(false) {
                (service, limit.min(slots), 0, None)
            } else {
                warm(limit)
            }
        })
    }

    #[test]
    fn an_open_pacer_never_holds_calls_back_from_an_unstrained_upstream() {
        // 256 callers against a constant 1.3 s upstream: nothing waits for the pacer.
        let mut sim = Sim::open(0, 256);
        for _ in 0..20 {
            assert_eq!(sim.round(&|l| (1300 * MS, l, 0, None)), u32::MAX);
        }
        assert!(sim.pacer.is_open());
        assert_eq!(sim.pacer.last_signal(), PacerSignal::None);
        // Under a configured ceiling it is open up to the ceiling.
        let mut sim = Sim::open(100, 256);
        assert_eq!(sim.round(&|l| (1300 * MS, l, 0, None)), 100);
    }

    #[test]
    fn an_open_pacer_closes_on_a_queue_and_holds_it_short() {
        let mut sim = Sim::open(0, 512);
        let upstream = cold_queueing(64, 200 * MS);
        let mut limits = Vec::new();
        for _ in 0..200 {
            limits.push(sim.round(&upstream));
        }
        assert!(!sim.pacer.is_open());
        assert_eq!(sim.pacer.last_signal(), PacerSignal::Queueing);
        let late = &limits[100..];
        let (lo, hi) = (late.iter().min().unwrap(), late.iter().max().unwrap());
        // The same band as from slow start: every slot busy, at most half the slots waiting.
        assert!(*lo >= 60 && *hi <= 96, "{lo}..{hi}: {late:?}");
        // The first cut started from the 512 in flight, not from the open limit.
        let first_cut = limits.iter().find(|l| **l < u32::MAX).unwrap();
        assert!((256..=486).contains(first_cut), "{limits:?}");
    }

    #[test]
    fn an_open_pacer_finds_a_rate_limit_with_and_without_headers() {
        for (headers, max_refused) in [(true, 0.02), (false, 0.05)] {
            let mut sim = Sim::open(0, 1024);
            let (goodput, refused) = steady_state(&mut sim, &rate_limited(1000, headers));
            assert!(goodput >= 0.9, "headers {headers}: goodput {goodput}");
            assert!(
                refused <= max_refused,
                "headers {headers}: refused share {refused}"
            );
            assert!(!sim.pacer.is_open());
        }
    }

    #[test]
    fn a_new_pacer_is_in_slow_start_without_a_baseline() {
        let pacer = AdaptivePacer::new(8, 0);
        assert!(pacer.in_slow_start());
        assert_eq!(pacer.baseline(), None);
    }

    #[test]
    fn slow_start_triples_per_round_and_has_no_hidden_ceiling() {
        let mut sim = Sim::new(8, 0);
        let mut seen = Vec::new();
        for _ in 0..7 {
            seen.push(sim.round(&|l| (200 * MS, l, 0, None)));
        }
        assert_eq!(seen, [24, 72, 216, 648, 1944, 5832, 17496]);
        assert!(sim.pacer.in_slow_start());
        assert_eq!(sim.pacer.last_signal(), PacerSignal::None);
    }

    #[test]
    fn a_configured_ceiling_is_a_hard_cap() {
        let mut sim = Sim::new(8, 100);
        for _ in 0..10 {
            sim.round(&|l| (200 * MS, l, 0, None));
        }
        assert_eq!(sim.pacer.limit(), 100);
    }

    #[test]
    fn an_idle_source_does_not_grow() {
        let mut p = AdaptivePacer::new(8, 0);
        let t0 = Instant::now();
        for i in 0..100 {
            p.observe(&PacerObservation {
                latency: 200 * MS,
                in_flight: 2,
                ..PacerObservation::new(AttemptVerdict::Success, t0 + i * 10 * MS)
            });
        }
        assert_eq!(p.limit(), 8);
    }

    #[test]
    fn moderate_latency_rise_in_slow_start_is_not_a_queue() {
        // A busy host: latency creeps up 25 % as the limit grows; slow start goes on.
        let mut sim = Sim::new(8, 0);
        for _ in 0..7 {
            sim.round(&|l| (200 * MS + (l / 20).min(50) * MS, l, 0, None));
        }
        assert!(sim.pacer.in_slow_start());
        assert!(sim.pacer.limit() >= 1000, "{}", sim.pacer.limit());
    }

    #[test]
    fn a_queueing_server_is_held_near_what_it_serves_at_once() {
        let mut sim = Sim::new(8, 0);
        let mut limits = Vec::new();
        for _ in 0..200 {
            limits.push(sim.round(&queueing(64, 200 * MS)));
        }
        assert_eq!(sim.pacer.last_signal(), PacerSignal::Queueing);
        assert!(!sim.pacer.in_slow_start());
        let late = &limits[100..];
        let (lo, hi) = (late.iter().min().unwrap(), late.iter().max().unwrap());
        // It never starves the server (≥ 64 keeps all slots busy) and keeps its queue short:
        // at most half the slots waiting, so the server's latency stays under 1.5× its own.
        assert!(*lo >= 60 && *hi <= 96, "{lo}..{hi}: {late:?}");
    }

    #[test]
    fn millisecond_jitter_on_a_fast_upstream_is_not_a_queue() {
        // A 5 ms upstream whose answers take 15 ms on a busy host: 3x, but only 10 ms added.
        let mut sim = Sim::new(8, 0);
        sim.round(&|l| (5 * MS, l, 0, None));
        for _ in 0..20 {
            sim.round(&|l| (15 * MS, l.min(64), 0, None));
        }
        assert_eq!(sim.pacer.last_signal(), PacerSignal::None);
        assert!(sim.pacer.in_slow_start());
    }

    #[test]
    fn a_429_cuts_by_at_most_half_once_per_round() {
        let mut p = AdaptivePacer::new(64, 0);
        let t0 = Instant::now();
        for i in 0..10 {
            p.observe(&PacerObservation {
                retry_after: Some(Duration::from_secs(1)),
                ..PacerObservation::new(AttemptVerdict::RateLimited, t0 + i * MS)
            });
        }
        assert_eq!(p.limit(), 32);
        assert_eq!(p.last_signal(), PacerSignal::RateLimited);
    }

    #[test]
    fn a_queueing_cut_that_latency_does_not_follow_is_undone() {
        // Answers take 3 s whatever the load, but the cold burst's first round saw only the
        // quick ones (1 s): against that baseline every later round reads as a queue.
        let mut sim = Sim::open(0, 32);
        let first = std::cell::Cell::new(true);
        let upstream: Box<Upstream> = Box::new(move |l| {
            let latency = if first.replace(false) { 1000 } else { 3000 };
            (latency * MS, l, 0, None)
        });
        let limits: Vec<u32> = (0..20).map(|_| sim.round(&upstream)).collect();
        assert_eq!(sim.pacer.last_signal(), PacerSignal::Queueing);
        let lowest = *limits.iter().min().unwrap();
        assert!(lowest <= 16, "it cut: {limits:?}");
        // The cuts did not bring latency down: the baseline starts again from 3 s and the
        // limit is back where the cuts started, at slow start's pace, and stays there.
        assert_eq!(sim.pacer.baseline(), Some(3000 * MS));
        let back = limits.iter().rposition(|&l| l < 32).unwrap();
        assert!(back < 12, "{limits:?}");
        assert!(limits[back + 1..].iter().all(|&l| l >= 32), "{limits:?}");
    }

    /// Feeds one round of successes `latencies_ms` (one in flight: no growth) a few
    /// milliseconds apart, five seconds after the previous round (longer than any round).
    fn feed_round(pacer: &mut AdaptivePacer, now: &mut Instant, latencies_ms: &[u64]) {
        *now += 5000 * MS;
        for &latency in latencies_ms {
            *now += MS;
            pacer.observe(&PacerObservation {
                latency: Duration::from_millis(latency),
                ..PacerObservation::new(AttemptVerdict::Success, *now)
            });
        }
    }

    #[test]
    fn a_round_reads_as_a_queue_only_beyond_its_own_spread() {
        // In slow start a round twice the baseline (1 s) is a queue: 2.07 s on average is —
        // unless its answers spread so widely (0.2–5 s) that chance explains the mean.
        let spread = [200, 1000, 5000];
        let tight = [2060, 2070, 2080];
        let mut pacer = AdaptivePacer::new(8, 0);
        let mut now = Instant::now();
        for _ in 0..3 {
            feed_round(&mut pacer, &mut now, &[900, 1000, 1100]);
        }
        feed_round(&mut pacer, &mut now, &spread);
        feed_round(&mut pacer, &mut now, &spread);
        assert_eq!(pacer.last_signal(), PacerSignal::None);
        assert!(pacer.in_slow_start());
        feed_round(&mut pacer, &mut now, &tight);
        feed_round(&mut pacer, &mut now, &tight);
        assert_eq!(pacer.last_signal(), PacerSignal::Queueing);
        assert!(pacer.limit() < 8);
    }

    #[test]
    fn rounds_of_fewer_than_three_answers_are_not_judged() {
        // One or two answers say nothing of a queue; neither do they set the baseline.
        let mut pacer = AdaptivePacer::new(8, 0);
        let mut now = Instant::now();
        feed_round(&mut pacer, &mut now, &[100, 100]);
        feed_round(&mut pacer, &mut now, &[1000, 1000]);
        feed_round(&mut pacer, &mut now, &[3000]);
        assert_eq!(pacer.baseline(), None);
        assert_eq!(pacer.last_signal(), PacerSignal::None);
    }

    #[test]
    fn retry_after_freezes_growth_until_it_passes() {
        let mut p = AdaptivePacer::new(10, 0);
        let t0 = Instant::now();
        p.observe(&PacerObservation {
            retry_after: Some(Duration::from_secs(1)),
            ..PacerObservation::new(AttemptVerdict::RateLimited, t0)
        });
        let cut = p.limit();
        let ok = |at: Duration| PacerObservation {
            latency: 200 * MS,
            in_flight: 100,
            ..PacerObservation::new(AttemptVerdict::Success, t0 + at)
        };
        for i in 1..50 {
            p.observe(&ok(i * 10 * MS));
        }
        assert_eq!(p.limit(), cut);
        for i in 0..50 {
            p.observe(&ok(Duration::from_secs(1) + i * 20 * MS));
        }
        assert!(p.limit() > cut);
    }

    /// Each round, a token bucket of `rate`/s admits `rate × latency` attempts and refuses the
    /// rest (with `Retry-After: 1`); `headers` adds OpenAI-style rate-limit headers.
    fn rate_limited(rate: u32, headers: bool) -> Box<Upstream> {
        Box::new(move |limit| {
            let latency = 200 * MS;
            let admitted = rate / 5;
            let ok = limit.min(admitted);
            let refused = limit - ok;
            let remaining = u64::from(admitted.saturating_sub(limit)) * 5;
            let hint = headers.then(|| RateLimitHint {
                limit: Some(u64::from(rate)),
                remaining: Some(remaining),
                reset: Some(Duration::from_secs_f64(
                    (u64::from(rate) - remaining) as f64 / f64::from(rate),
                )),
            });
            (latency, ok, refused, hint)
        })
    }

    fn steady_state(sim: &mut Sim, answer: &Upstream) -> (f64, f64) {
        let (mut ok, mut refused, mut offered) = (0u64, 0u64, 0u64);
        for i in 0..300 {
            let limit = sim.pacer.limit();
            let (_, a, r, _) = answer(limit);
            sim.round(answer);
            if i >= 100 {
                ok += u64::from(a);
                refused += u64::from(r);
                offered += 1;
            }
        }
        let goodput = ok as f64 / (offered as f64 * 200.0);
        (goodput, refused as f64 / (ok + refused) as f64)
    }

    #[test]
    fn a_rate_limit_is_found_without_headers() {
        let mut sim = Sim::new(8, 0);
        let (goodput, refused) = steady_state(&mut sim, &rate_limited(1000, false));
        assert!(goodput >= 0.9, "goodput {goodput}");
        assert!(refused <= 0.05, "refused share {refused}");
    }

    #[test]
    fn rate_limit_headers_are_an_early_signal() {
        let mut sim = Sim::new(8, 0);
        let (goodput, refused) = steady_state(&mut sim, &rate_limited(1000, true));
        assert!(goodput >= 0.9, "goodput {goodput}");
        assert!(refused <= 0.02, "refused share {refused}");
        assert_eq!(sim.pacer.header_rate, Some(1000.0));
    }
}
