//! Deterministic simulation of governed calls (the FoundationDB / VOPR idea, at the scale of
//! one scope), through the production call driver.
//!
//! Every call runs `runtime::driver::run` — the driver every production call runs — with the
//! simulator's `CallEffects`: selection is the router's `Picker` over real `SourceShared`
//! values (real pacer slots, cooldown memos and the scope's `Notify`), admission and settlement
//! are `ComposedAttempts` over the memory gate and breakers, each attempt feeds the real pacer
//! and health policies (`SourcePolicies`, what the source actor runs), and streaming calls emit
//! their deltas into a real `EventSink`. Only the world is simulated: a seeded fault process
//! behind a [`Transport`], timers, and a hand-rolled single-threaded executor in virtual time
//! ([`ManualClock`]). No tokio, no threads: one seed is one schedule, replayed exactly, and the
//! invariants listed in `ARCHITECTURE.md` ("Simulation") are checked at every step.
//!
//! What is modelled per seed: 1–4 sources with latency distributions, 429 bursts with and
//! without Retry-After (Anthropic's `rate_limit_error`, Gemini's `RESOURCE_EXHAUSTED` with its
//! `RetryInfo` delay: the same class), a 429 fault window (every answer pushes back) that ends,
//! an overload storm (Anthropic's `529 overloaded_error`: every answer a fast transient server
//! error without a hint, for a while), dead-key
//! windows that recover, black holes (cut by the attempt watchdog), mid-stream truncation, slow
//! first tokens, per-source and scope gates; the adaptive or AIMD pacer; a governance "backend
//! down" window (an admission actor restarting or Redis away: admits fail closed, bookkeeping
//! sent meanwhile is lost and the lease/probe TTLs reclaim it); random caller cancellations at
//! any point (the call's future is dropped, as a caller drops it); streams cut after content,
//! some after a tool call's first piece, continued on another source that takes a prefill (half
//! the seeds, docs/behaviour.md §5.10). Not modelled: the actors'
//! mailboxes and restarts themselves (their effect on a call is the backend-down window).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::machine::call::{Action, CallMachine, Ending, Step};
use crate::memory::{ManualClock, MemoryBreakers, MemoryGate};
use crate::outcome::{Classify, FailureClass, SourceReason};
use crate::policy::adaptive_pacer::AdaptivePacer;
use crate::policy::pacer::{AimdPacer, Pacer, PacerObservation};
use crate::policy::reserve::BatchReserve;
use crate::policy::select::{Candidate, LeastInflight, Selector};
use crate::policy::wait_queue::Priority;
use crate::ports::attempt::{AttemptAdmit, AttemptBackend, AttemptOutcome, BreakerStatus};
use crate::ports::breaker::{BreakerBackend, BreakerConfig, BreakerState};
use crate::ports::gate::{GateBackend, Limits};
use crate::ports::transport::{EventSink, StreamCut, Transport};
use crate::ports::BackendError;
use crate::runtime::admission::{AdmitAnswer, AdmitRequest, Permit};
use crate::runtime::driver::{self, CallEffects};
use crate::runtime::metrics::{ScopeMetrics, SourceMetrics};
use crate::runtime::router::{Picker, Selection};
use crate::runtime::source::{PacerFactory, SourcePolicies};
use crate::runtime::waiting_room::WaitingRoom;
use crate::runtime::{
    AttemptReport, AttemptResult, CallFailure, CallObserver, CallOptions, ScopeConfig, ScopeReason,
    SourceShared, TerminalReport,
};
use futures::FutureExt;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The result of one simulated seed.
///
/// ```
/// use polygateway_actors::testkit::sim::run_seed;
/// let report = run_seed(42, 20, false);
/// assert_eq!(report.calls, 20);
/// assert!(report.violations.is_empty(), "{:?}", report.violations);
/// ```
#[derive(Debug, Clone)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Calls simulated.
    pub calls: u32,
    /// Machine steps taken (all calls).
    pub steps: u64,
    /// Broken invariants, each naming the call, the virtual time and what was wrong.
    pub violations: Vec<String>,
    /// Hash of every action of every call, with its virtual time: equal for equal seeds.
    pub trace_hash: u64,
    /// With `keep_trace`, the events of the first call that broke an invariant (else empty).
    pub trace: Vec<String>,
    /// Pacer observations made (all sources).
    pub pacer_observations: u64,
    /// Fault windows after which a pacer's recovery was checked.
    pub recoveries_checked: u32,
    /// First sends of calls that had waited in the scope's waiting room (each checked against
    /// the room's order).
    pub room_turns_checked: u32,
    /// Sends of calls with a deadline (each checked against it).
    pub deadline_sends_checked: u32,
    /// Attempts answered by an overload storm (`529 overloaded_error`).
    pub overloaded_answers: u32,
    /// Hedges of first tokens sent (seeds with hedging on), each checked against the budget.
    pub hedges: u64,
    /// Continuations of cut streams sent (seeds with continuation on), each checked: never
    /// after a tool-call delta, never on the cut source, only on a source that takes a prefill.
    pub continuations: u64,
}

/// Simulate `calls` calls under the fault schedule drawn from `seed`. `keep_trace` records a
/// readable trace (slower; for replaying a failing seed).
///
/// ```
/// use polygateway_actors::testkit::sim::run_seed;
/// // Replay is exact: the same seed gives the same trace.
/// assert_eq!(run_seed(7, 10, false).trace_hash, run_seed(7, 10, false).trace_hash);
/// ```
pub fn run_seed(seed: u64, calls: u32, keep_trace: bool) -> SeedReport {
    let world = Rc::new(World::new(seed, calls, keep_trace));
    Executor::new(Rc::clone(&world)).run();
    world.check_quiescent();
    let mut state = world.lock();
    let trace = state
        .violations
        .first()
        .map(|(call, _)| state.calls[*call].trace.clone())
        .unwrap_or_default();
    SeedReport {
        seed,
        calls,
        steps: state.steps,
        violations: std::mem::take(&mut state.violations)
            .into_iter()
            .map(|(_, v)| v)
            .collect(),
        trace_hash: state.hash,
        trace,
        pacer_observations: state.pacer.iter().map(|p| p.observations).sum(),
        recoveries_checked: state.recoveries_checked,
        room_turns_checked: state.room_turns_checked,
        deadline_sends_checked: state.deadline_sends_checked,
        overloaded_answers: state.overloaded_answers,
        hedges: state.calls.iter().map(|c| u64::from(c.hedges)).sum(),
        continuations: state.calls.iter().map(|c| u64::from(c.continuations)).sum(),
    }
}

/// Virtual milliseconds since the start of the seed.
type Ms = u64;

const SCOPE: &str = "sim";
/// How long every attempt of a scripted schedule takes.
const SCRIPT_LATENCY: Ms = 10;
/// Past this many steps a seed is a runaway (a call loops without time passing).
const STEP_LIMIT: u64 = 2_000_000;
/// Successes after a 429 fault window (counted from the last cut, if a later signal cut again)
/// within which the pacer must have grown from its lowest limit of the window (unless the window
/// never brought it below its pre-window limit).
const RECOVERY_SUCCESSES: u32 = 40;
/// The oscillation band: one observation moves a pacer's limit at most down to half
/// ([`DEEPEST_CUT`]: the adaptive pacer's cuts are clamped to ×0.5, AIMD halves) and at most up
/// by [`STEEPEST_RISE`] (the adaptive pacer's slow-start gain; AIMD adds less).
const DEEPEST_CUT: f64 = 0.5;
const STEEPEST_RISE: u32 = 2;
/// The stream delta that is a tool call's first piece (every other delta is text).
const TOOL_DELTA: u64 = u64::MAX;

#[derive(Debug)]
struct Faults {
    latency: (Ms, Ms),
    slow_first_token: f64,
    transient: f64,
    rate_limited: f64,
    /// Share of 429s and 503s that carry Retry-After.
    retry_after: f64,
    black_hole: f64,
    truncate: f64,
    rejected: f64,
    invalid: f64,
    /// The key is dead in `[from, until)`, then recovers.
    dead: Option<(Ms, Ms)>,
    /// Every answer is a 429 in `[from, until)` (a quota exhausted for a while).
    pushback: Option<(Ms, Ms)>,
    /// Every answer is a fast `529 overloaded_error` in `[from, until)` (a provider too busy to
    /// serve: transient, no Retry-After).
    overloaded: Option<(Ms, Ms)>,
    /// The source takes a prefill: a continuation of a stream cut elsewhere may be sent to it.
    prefill: bool,
}

/// How a simulated attempt answers.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Ok,
    Fail(SimError),
}

/// A simulated transport failure, classified as a real provider error would be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SimError {
    class: FailureClass,
    reason: SourceReason,
    rate_limited: bool,
    retry_after: Option<Duration>,
    /// A stream cut after content: the source that cut it, and whether its last delta was a
    /// tool call's first piece.
    cut: Option<(usize, bool)>,
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "simulated {} ({})",
            self.class.as_str(),
            self.reason.as_str()
        )
    }
}

impl std::error::Error for SimError {}

impl Classify for SimError {
    fn class(&self) -> FailureClass {
        self.class
    }
    fn is_rate_limited(&self) -> bool {
        self.rate_limited
    }
    fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
    fn source_reason(&self) -> SourceReason {
        self.reason
    }
}

/// One simulated call's request.
#[derive(Debug)]
pub(crate) struct SimRequest {
    call: usize,
    streaming: bool,
    /// A continuation of the stream the given source cut.
    continues_from: Option<usize>,
}

/// A source's upstream: answers drawn from its fault process after a virtual-time latency.
#[derive(Debug)]
pub(crate) struct SimTransport {
    index: usize,
    state: Arc<Mutex<State>>,
}

#[async_trait::async_trait]
impl Transport for SimTransport {
    type Request = SimRequest;
    type Response = ();
    type Event = u64;
    type Error = SimError;

    async fn send(
        &self,
        request: &SimRequest,
        events: Option<&EventSink<u64>>,
    ) -> Result<(), SimError> {
        let (after, answer, deltas) = {
            let mut state = lock(&self.state);
            if state.script.is_some() {
                state.calls[request.call].sends += 1;
                let answer = state.script.as_mut().and_then(VecDeque::pop_front);
                (SCRIPT_LATENCY, answer.unwrap_or(Answer::Ok), 0)
            } else {
                if let Some(cut) = request.continues_from {
                    let prefill = state.faults[self.index].prefill;
                    if cut == self.index || !prefill {
                        let what = format!(
                            "a continuation of s{cut}'s stream sent to s{} (prefill {prefill})",
                            self.index
                        );
                        state.violation(request.call, what);
                    }
                }
                state.plan_attempt(request, self.index)
            }
        };
        Sleep::new(Arc::clone(&self.state), after).await;
        let tool = matches!(
            answer,
            Answer::Fail(SimError {
                cut: Some((_, true)),
                ..
            })
        );
        if let Some(events) = events {
            for delta in 0..deltas {
                let delta = if tool && delta + 1 == deltas {
                    lock(&self.state).calls[request.call].tool_delta[self.index] = true;
                    TOOL_DELTA
                } else {
                    delta
                };
                // The consumer is the call's own receiver, alive and never full.
                let _ = events.emit(delta).await;
            }
        }
        match answer {
            Answer::Ok => Ok(()),
            Answer::Fail(error) => Err(error),
        }
    }

    fn tokens_used(_response: &()) -> Option<u64> {
        None
    }

    fn prefill(&self) -> bool {
        lock(&self.state).faults[self.index].prefill
    }

    fn stream_cut(request: &SimRequest, error: &SimError) -> Option<StreamCut<SimRequest>> {
        let (source, tool_call) = error.cut?;
        Some(StreamCut {
            tool_call,
            ..StreamCut::text(SimRequest {
                call: request.call,
                streaming: request.streaming,
                continues_from: Some(source),
            })
        })
    }
}

/// What one call's invariants are checked against, kept independently of the driver.
#[derive(Debug)]
struct CallBook {
    seed: u64,
    streaming: bool,
    done: bool,
    granted: u32,
    pushbacks: u32,
    rows: u32,
    terminal_rows: u32,
    sends: u32,
    /// Attempts the machine counted, as of its last step.
    attempts: u32,
    /// The source of the attempt being sent, while the machine's `Send` is performed: an
    /// admission or a row of another source meanwhile is a hedge's.
    sending: Option<usize>,
    /// Hedges admitted (each is sent once and leaves one row, like an attempt).
    hedges: u32,
    /// The source whose cut stream is being continued, from the driver's word until the
    /// machine's next step: an admission meanwhile is the continuation's.
    continuing: Option<usize>,
    /// Continuations admitted (each is sent once and leaves one row, like an attempt).
    continuations: u32,
    /// Per source, whether it sent this call a tool call's first piece.
    tool_delta: Vec<bool>,
    /// Per source, the earliest moment it could serve as far as this call has been told.
    known_ready: Vec<Ms>,
    last_progress: Option<Option<Duration>>,
    trace: Vec<String>,
    /// Its class, tenant and weight in the waiting room, and its deadline (virtual ms).
    priority: Priority,
    tenant: Option<Arc<str>>,
    weight: u32,
    deadline: Option<Ms>,
    /// Its arrival number in the room, once it has waited; whether it was ever admitted.
    place: Option<u64>,
    admitted: bool,
    /// Its last selection found nothing but sources at their own concurrency limit, in a
    /// scope that fails fast on a full quota.
    capped_only: bool,
    /// Each attempt as the observer saw it: (source, result) (scripted runs compare it).
    #[cfg(test)]
    log: AttemptLog,
    /// How the call ended (`ok` or the failure's kind), once it returned.
    #[cfg(test)]
    ending: Option<&'static str>,
}

impl CallBook {
    /// A call not yet started, over `sources` sources.
    fn new(seed: u64, streaming: bool, sources: usize) -> Self {
        Self {
            seed,
            streaming,
            done: false,
            granted: 0,
            pushbacks: 0,
            rows: 0,
            terminal_rows: 0,
            sends: 0,
            attempts: 0,
            sending: None,
            hedges: 0,
            continuing: None,
            continuations: 0,
            tool_delta: vec![false; sources],
            known_ready: vec![0; sources],
            last_progress: None,
            trace: Vec::new(),
            priority: Priority::Normal,
            tenant: None,
            weight: 1,
            deadline: None,
            place: None,
            admitted: false,
            capped_only: false,
            #[cfg(test)]
            log: Vec::new(),
            #[cfg(test)]
            ending: None,
        }
    }
}

/// What the pacer invariants follow per source.
#[derive(Debug, Default)]
struct PacerBook {
    observations: u64,
    /// Limit before the 429 window began, and the lowest limit seen during it.
    before_window: Option<u32>,
    lowest_in_window: Option<u32>,
    /// Successes observed after the window ended (and after any later 429's `Retry-After`, which
    /// freezes growth); whether the recovery was judged.
    successes_after: u32,
    /// Until when the 429s seen so far froze the pacer's growth (their `Retry-After`).
    frozen_until: Ms,
    judged: bool,
    /// The limit after the previous observation.
    last: Option<u32>,
    /// The pacer started open (`AdaptivePacer::open`) and has not cut yet: its first cut starts
    /// from what was in flight, not from its limit.
    open: bool,
    /// The most attempts in flight any observation reported while the pacer was open.
    open_peak: u32,
}

/// A timer's payload.
#[derive(Debug)]
enum Timer {
    Wake(Waker),
    Start(usize),
    Cancel(usize),
}

/// The world's mutable state, behind one lock (never held across an await or a call into the
/// governance code).
#[derive(Debug)]
struct State {
    now: Ms,
    rng: SmallRng,
    faults: Vec<Faults>,
    /// A scripted schedule instead of the fault process: the answers of the attempts in order.
    script: Option<VecDeque<Answer>>,
    attempt_timeout: Ms,
    backend_down: Option<(Ms, Ms)>,
    dead_seen: Vec<Option<Ms>>,
    epochs: Vec<u64>,
    timers: BinaryHeap<Reverse<(Ms, u64)>>,
    timer_payloads: BTreeMap<u64, Timer>,
    seq: u64,
    ids: u64,
    probes_out: i64,
    steps: u64,
    hash: u64,
    keep_trace: bool,
    calls: Vec<CallBook>,
    pacer: Vec<PacerBook>,
    recoveries_checked: u32,
    room_turns_checked: u32,
    deadline_sends_checked: u32,
    overloaded_answers: u32,
    /// Attempts sent through a hedge race (each earns its share of a hedge).
    races: u64,
    violations: Vec<(usize, String)>,
}

impl State {
    fn new(
        rng: SmallRng,
        faults: Vec<Faults>,
        attempt_timeout: Ms,
        backend_down: Option<(Ms, Ms)>,
        calls: Vec<CallBook>,
        keep_trace: bool,
    ) -> Self {
        let n = faults.len();
        State {
            now: 0,
            rng,
            faults,
            script: None,
            attempt_timeout,
            backend_down,
            dead_seen: vec![None; n],
            epochs: vec![0; n],
            timers: BinaryHeap::new(),
            timer_payloads: BTreeMap::new(),
            seq: 0,
            ids: 0,
            probes_out: 0,
            steps: 0,
            hash: 0xcbf2_9ce4_8422_2325,
            keep_trace,
            calls,
            pacer: (0..n).map(|_| PacerBook::default()).collect(),
            recoveries_checked: 0,
            room_turns_checked: 0,
            deadline_sends_checked: 0,
            overloaded_answers: 0,
            races: 0,
            violations: Vec::new(),
        }
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

fn fnv(hash: u64, value: u64) -> u64 {
    value.to_le_bytes().iter().fold(hash, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn ms(d: Duration) -> Ms {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl State {
    fn timer(&mut self, at: Ms, timer: Timer) {
        self.seq += 1;
        self.timers.push(Reverse((at, self.seq)));
        self.timer_payloads.insert(self.seq, timer);
    }

    fn violation(&mut self, call: usize, what: String) {
        let line = format!("call #{call} at {} ms: {what}", self.now);
        self.calls[call].trace.push(format!("VIOLATION {what}"));
        self.violations.push((call, line));
    }

    fn down(&self) -> bool {
        self.backend_down
            .is_some_and(|(from, until)| (from..until).contains(&self.now))
    }

    fn trace_event(&mut self, call: usize, what: impl FnOnce() -> String) {
        if self.keep_trace {
            let line = format!("{} ms:   <- {}", self.now, what());
            self.calls[call].trace.push(line);
        }
    }

    /// The attempt's answer, drawn from the source's fault process: (duration, answer, stream
    /// deltas delivered before it).
    fn plan_attempt(&mut self, request: &SimRequest, source: usize) -> (Ms, Answer, u64) {
        let now = self.now;
        self.calls[request.call].sends += 1;
        let timeout = self.attempt_timeout;
        let rng = &mut self.rng;
        let f = &self.faults[source];
        let latency = rng.random_range(f.latency.0..=f.latency.1.max(f.latency.0));
        let fail = |class, reason, rate_limited, retry_after| {
            Answer::Fail(SimError {
                class,
                reason,
                rate_limited,
                retry_after,
                cut: None,
            })
        };
        let hint = |rng: &mut SmallRng| {
            rng.random_bool(f.retry_after)
                .then(|| Duration::from_millis(rng.random_range(100..=10_000)))
        };
        let within = |window: Option<(Ms, Ms)>| window.is_some_and(|(a, b)| (a..b).contains(&now));
        if within(f.dead) {
            let dead = fail(
                FailureClass::SourceDead,
                SourceReason::SourceDead,
                false,
                None,
            );
            return (latency.min(50), dead, 0);
        }
        if within(f.pushback) {
            let h = hint(rng);
            let pushed = fail(FailureClass::Transient, SourceReason::RateLimited, true, h);
            return (latency.min(100), pushed, 0);
        }
        if within(f.overloaded) {
            let busy = fail(
                FailureClass::Transient,
                SourceReason::ServerError,
                false,
                None,
            );
            self.overloaded_answers += 1;
            return (latency.min(50), busy, 0);
        }
        let roll: f64 = rng.random();
        let mut edge = 0.0;
        let mut next = |p: f64| {
            edge += p;
            roll < edge
        };
        let transient = FailureClass::Transient;
        if next(f.black_hole) {
            // The watchdog ends it.
            (
                timeout,
                fail(transient, SourceReason::Timeout, false, None),
                0,
            )
        } else if next(f.rate_limited) {
            let h = hint(rng);
            let pushed = fail(transient, SourceReason::RateLimited, true, h);
            (latency.min(100), pushed, 0)
        } else if next(f.transient) {
            let h = hint(rng);
            (
                latency,
                fail(transient, SourceReason::NetworkError, false, h),
                0,
            )
        } else if next(f.truncate) {
            let deltas = if request.streaming {
                rng.random_range(1..=20)
            } else {
                0
            };
            let mut cut = fail(transient, SourceReason::NetworkError, false, None);
            if let (Answer::Fail(error), true) = (&mut cut, deltas > 0) {
                // One cut in three ends on a tool call's first piece (no draw of the seed's
                // generator: its schedule stays what it was).
                error.cut = Some((source, (request.call as u64 + deltas) % 3 == 0));
            }
            (latency, cut, deltas)
        } else if next(f.rejected) {
            let reason = SourceReason::NetworkError;
            (
                latency,
                fail(FailureClass::RequestRejected, reason, false, None),
                0,
            )
        } else if next(f.invalid) {
            let reason = SourceReason::NetworkError;
            (
                latency,
                fail(FailureClass::ResultInvalid, reason, false, None),
                0,
            )
        } else if next(f.slow_first_token) {
            let slow = latency * 10;
            if slow > timeout {
                (
                    timeout,
                    fail(transient, SourceReason::Timeout, false, None),
                    0,
                )
            } else {
                (slow, Answer::Ok, 0)
            }
        } else {
            (latency, Answer::Ok, 0)
        }
    }

    fn record(&mut self, call: usize, step: &Step, base: Instant) {
        let (code, a, b) = match &step.action {
            Action::Select { exclude, avoid } => (
                1,
                exclude.iter().fold(0, |h, i| fnv(h, *i as u64)),
                avoid.map_or(u64::MAX, |a| a as u64),
            ),
            Action::Admit { source } => (2, *source as u64, 0),
            Action::Send { source, attempt } => (3, *source as u64, u64::from(*attempt)),
            Action::Backoff(d) => (4, ms(*d), 0),
            Action::AwaitSlot(d) => (5, ms(*d), 0),
            Action::AskProgress => (6, 0, 0),
            Action::Wait(d) => (7, ms(*d), 0),
            Action::Finish(ending) => (
                8,
                match ending {
                    Ending::Success => 0,
                    Ending::Unavailable { reason, .. } => 1 + *reason as u64,
                    Ending::Rejected => 20,
                    Ending::Invalid => 21,
                    Ending::StreamBroken { .. } => 22,
                },
                match ending {
                    Ending::Unavailable { retry_after, .. } => ms(*retry_after),
                    _ => 0,
                },
            ),
        };
        for v in [self.now, call as u64, code, a, b] {
            self.hash = fnv(self.hash, v);
        }
        if self.keep_trace {
            let cool = step
                .cool
                .map(|(s, t)| {
                    format!(
                        " cool s{s} until {} ms",
                        ms(t.saturating_duration_since(base))
                    )
                })
                .unwrap_or_default();
            let line = format!("{} ms: {:?}{cool}", self.now, step.action);
            self.calls[call].trace.push(line);
        }
    }

    fn check_call(
        &mut self,
        call: usize,
        action: &Action,
        machine: &CallMachine,
        config: &ScopeConfig,
    ) {
        let max = config.max_attempts;
        let window = config.stall_window;
        let c = &self.calls[call];
        let used = machine.budget_used();
        let mut problems = Vec::new();
        if used > max {
            problems.push(format!("budget {used} above MAX_ATTEMPTS {max}"));
        }
        if used != c.granted - c.pushbacks {
            problems.push(format!(
                "budget {used} but {} attempts granted, {} of them 429",
                c.granted, c.pushbacks
            ));
        }
        if std::mem::take(&mut self.calls[call].capped_only) {
            // QUOTA_FULL=fail_fast: a source's own concurrency limit is not waited for.
            let fails_fast = matches!(
                action,
                Action::Finish(Ending::Unavailable {
                    reason: ScopeReason::QuotaExhausted | ScopeReason::DeadlineExceeded,
                    ..
                })
            );
            if !fails_fast {
                problems.push(format!(
                    "only sources at their concurrency limit, fail-fast scope, yet {action:?}"
                ));
            }
        }
        let c = &self.calls[call];
        if let Action::Wait(_) = action {
            let fresh = matches!(c.last_progress, Some(Some(age)) if age < window);
            if machine.waited() >= window && !fresh {
                problems.push(format!(
                    "waits on after {:?} of stalling without fresh scope progress",
                    machine.waited()
                ));
            }
        }
        for p in problems {
            self.violation(call, p);
        }
    }

    /// At each send: nothing goes out past the call's deadline. At a call's first send, the
    /// waiting room's order (docs/behaviour.md §5.7): no call that was waiting before it and
    /// never admitted since still waits while it is ahead in the order (a higher class, or the
    /// same class and tenant with an earlier deadline or arrival). Such a call was queued when
    /// this one got its turn, so the turn was not the head's.
    fn check_send(&mut self, call: usize, waiting: &[u64]) {
        let now = self.now;
        let c = &self.calls[call];
        let mut problems = Vec::new();
        if let Some(deadline) = c.deadline {
            self.deadline_sends_checked += 1;
            if now > deadline {
                problems.push(format!(
                    "sent at {now} ms, past its deadline at {deadline} ms"
                ));
            }
        }
        if let (false, Some(mine)) = (c.admitted, c.place) {
            self.room_turns_checked += 1;
            let key = |b: &CallBook| (b.deadline.is_none(), b.deadline, b.place);
            for &w in waiting.iter().filter(|&&w| w < mine) {
                let Some(other) = self.calls.iter().position(|b| b.place == Some(w)) else {
                    continue;
                };
                let b = &self.calls[other];
                let higher = b.priority < c.priority;
                let ahead_in_tenant =
                    b.priority == c.priority && b.tenant == c.tenant && key(b) < key(c);
                if !b.admitted && (higher || ahead_in_tenant) {
                    problems.push(format!(
                        "first sent (arrival {mine}, {}) while call {other} (arrival {w}, {}) \
                         waits ahead of it",
                        c.priority, b.priority
                    ));
                }
            }
        }
        self.calls[call].admitted = true;
        for p in problems {
            self.violation(call, p);
        }
    }

    fn check_epoch(&mut self, call: usize, source: usize, epoch: u64) {
        if epoch < self.epochs[source] {
            let what = format!(
                "breaker epoch of s{source} went back from {} to {epoch}",
                self.epochs[source]
            );
            self.violation(call, what);
        } else {
            self.epochs[source] = epoch;
        }
    }

    /// The pacer invariants, after `source`'s policies observed one attempt: no limit below 1,
    /// recovery after the 429 fault window, no oscillation beyond the band.
    fn check_pacer(&mut self, call: usize, source: usize, limit: u32, attempt: &PacerObservation) {
        if limit < 1 {
            self.violation(call, format!("s{source} pacer limit {limit} below 1"));
        }
        let now = self.now;
        let window = self.faults[source].pushback;
        let book = &mut self.pacer[source];
        book.observations += 1;
        let mut problems = Vec::new();
        let rate_limited = attempt.verdict == crate::outcome::AttemptVerdict::RateLimited;
        if rate_limited {
            // `Retry-After` freezes growth until it passes (a 429 inside the window may freeze
            // it well past the window's end).
            let freeze = attempt.retry_after.map_or(0, |d| d.as_millis() as Ms);
            book.frozen_until = book.frozen_until.max(now + freeze);
        }
        if let Some((from, until)) = window {
            if now < from {
                book.before_window = Some(limit);
            } else if now < until {
                book.lowest_in_window = Some(book.lowest_in_window.map_or(limit, |l| l.min(limit)));
            } else if !book.judged {
                // A cut after the window answers a new signal (a 429 burst, queueing): the
                // recovery from the window is counted from the last cut. So does a later 429 —
                // at the floor its cut is invisible (1 stays 1) — and its `Retry-After` freezes
                // growth, so successes count from the end of that freeze.
                if book.last.is_some_and(|last| limit < last) || rate_limited {
                    book.successes_after = 0;
                }
                if attempt.verdict == crate::outcome::AttemptVerdict::Success
                    && now >= book.frozen_until
                {
                    book.successes_after += 1;
                }
                if let (Some(lowest), Some(before)) = (book.lowest_in_window, book.before_window) {
                    if limit > lowest || lowest >= before {
                        book.judged = true;
                        self.recoveries_checked += 1;
                    } else if book.successes_after >= RECOVERY_SUCCESSES {
                        book.judged = true;
                        problems.push(format!(
                            "s{source} pacer stuck at {limit} after {} successes past its 429 window (was {before} before)",
                            book.successes_after
                        ));
                    }
                }
            }
        }
        let book = &mut self.pacer[source];
        if book.open {
            book.open_peak = book.open_peak.max(attempt.in_flight);
        }
        if let Some(last) = book.last.replace(limit) {
            if book.open {
                // An open pacer holds its limit until its first cut, which starts from what was
                // in flight: it lands at or below the most that ever was (plus the growth step
                // the success that closed the round may add in the same observation).
                if limit < last {
                    book.open = false;
                    if limit > book.open_peak.max(1).saturating_add(STEEPEST_RISE) {
                        problems.push(format!(
                            "s{source} open pacer's first cut went to {limit}, above the {} ever in flight",
                            book.open_peak
                        ));
                    }
                } else if limit > last {
                    problems.push(format!("s{source} open pacer grew from {last} to {limit}"));
                }
            } else {
                // Published limits are whole numbers: a cut of exactly one half may floor below
                // it.
                let floor = (f64::from(last) * DEEPEST_CUT).floor() as u32;
                if limit < floor.max(1) || limit > last.saturating_add(STEEPEST_RISE) {
                    problems.push(format!(
                        "s{source} pacer moved from {last} to {limit} in one observation (band: ×{DEEPEST_CUT} to +{STEEPEST_RISE})"
                    ));
                }
            }
        }
        for p in problems {
            self.violation(call, p);
        }
    }
}

/// A virtual-time sleep: ready once the world's clock reaches `at`. It always yields once (as
/// tokio's timers do), so a loop of zero-length waits still hands control back to the executor.
struct Sleep {
    state: Arc<Mutex<State>>,
    at: Ms,
    armed: bool,
}

impl Sleep {
    fn new(state: Arc<Mutex<State>>, after: Ms) -> Self {
        let at = lock(&state).now.saturating_add(after);
        Self {
            state,
            at,
            armed: false,
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = lock(&self.state);
        if self.armed && state.now >= self.at {
            return Poll::Ready(());
        }
        let at = self.at;
        state.timer(at, Timer::Wake(cx.waker().clone()));
        drop(state);
        self.armed = true;
        Poll::Pending
    }
}

/// The simulated scope: its sources and governance, shared by every call of the seed.
struct World {
    state: Arc<Mutex<State>>,
    clock: Arc<ManualClock>,
    base: Instant,
    config: ScopeConfig,
    sources: Vec<Arc<SourceShared<SimTransport>>>,
    policies: Mutex<Vec<SourcePolicies>>,
    picker: Mutex<(Box<dyn Selector>, SmallRng, Vec<Candidate>)>,
    gate: Arc<MemoryGate>,
    breakers: Arc<MemoryBreakers>,
    attempts: crate::ports::attempt::ComposedAttempts,
    metrics: ScopeMetrics,
    /// The scope's waiting room (the production one, sleeping in virtual time); its sources tell
    /// it when a pacer slot is freed.
    room: Arc<WaitingRoom>,
    /// Per call, when it arrives and when its caller gives up (if it does).
    arrivals: Vec<(Ms, Option<Ms>)>,
    /// Hedged first tokens, when the seed turns them on (`config.hedge`).
    hedging: Option<crate::runtime::hedge::Hedging>,
    /// Continuation of cut streams, when the seed turns it on (`config.continuation`).
    continuing: Option<crate::runtime::continuation::Continuing>,
}

impl World {
    fn new(seed: u64, calls: u32, keep_trace: bool) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let n = rng.random_range(1..=4usize);
        let mut config = ScopeConfig::new(SCOPE);
        config.max_attempts = rng.random_range(1..=4);
        config.backoff_base = Duration::from_millis(rng.random_range(50..=1_000));
        config.backoff_max = Duration::from_millis(rng.random_range(1_000..=8_000));
        config.quota_full_fails_fast = rng.random_bool(0.3);
        config.circuit_open_waits = rng.random_bool(0.5);
        config.stall_window = Duration::from_millis(rng.random_range(2_000..=60_000));
        config.poll_interval = Duration::from_millis(rng.random_range(100..=1_000));
        config.lease_ttl = Duration::from_secs(60);
        config.global = Limits {
            max_concurrency: if rng.random_bool(0.3) {
                rng.random_range(1..=6)
            } else {
                0
            },
            rpm: if rng.random_bool(0.2) {
                rng.random_range(20..=300)
            } else {
                0
            },
            tpm: if rng.random_bool(0.1) {
                rng.random_range(500..=5_000)
            } else {
                0
            },
        };
        // Half the seeds leave batch calls a share of every gate (`BACKPRESSURE__BATCH_RESERVE`).
        let share = if rng.random_bool(0.5) {
            rng.random_range(0.1..=0.5)
        } else {
            0.0
        };
        config.batch_reserve = BatchReserve::new(share).expect("within the allowed range");
        let horizon: Ms = u64::from(calls) * rng.random_range(20..=400);
        let mut faults = Vec::new();
        let mut specs = Vec::new();
        let mut opens = Vec::new();
        for _ in 0..n {
            let fault_rate = [0.0, 0.05, 0.3, 0.8][rng.random_range(0..4usize)];
            let dead = rng.random_bool(0.25).then(|| {
                let from = rng.random_range(0..=horizon.max(1));
                (from, from + rng.random_range(1_000..=120_000))
            });
            let pushback = rng.random_bool(0.3).then(|| {
                let from = rng.random_range(0..=horizon.max(1));
                (from, from + rng.random_range(500..=30_000))
            });
            // Drawn from a generator of its own, so the rest of every seed's schedule stays
            // what it was before overload storms were modelled.
            let mut storms = SmallRng::seed_from_u64(seed ^ 0x0529_0529 ^ faults.len() as u64);
            let overloaded = storms.random_bool(0.25).then(|| {
                let from = storms.random_range(0..=horizon.max(1));
                (from, from + storms.random_range(500..=20_000))
            });
            let breaker = BreakerConfig {
                fail_threshold: rng.random_range(1..=6),
                cooldown: Duration::from_millis(rng.random_range(500..=30_000)),
                max_cooldown: Duration::from_secs(60),
                probe_ttl: Duration::from_secs(30),
                min_calls: rng.random_range(3..=10),
                ..BreakerConfig::default()
            };
            let limits = Limits {
                max_concurrency: if rng.random_bool(0.4) {
                    rng.random_range(1..=4)
                } else {
                    0
                },
                rpm: if rng.random_bool(0.2) {
                    rng.random_range(10..=200)
                } else {
                    0
                },
                tpm: 0,
            };
            // The production default (adaptive, open until the first sign of strain), adaptive
            // from a small start (`PACER__START`) so the pacer is the obstacle now and then, or
            // AIMD.
            let start = rng.random_range(1..=8u32);
            let kind = rng.random_range(0..10u32);
            opens.push(kind < 3);
            let pacer: PacerFactory = if kind < 3 {
                Arc::new(move |l: &Limits| {
                    Box::new(AdaptivePacer::open(l.max_concurrency)) as Box<dyn Pacer>
                })
            } else if kind < 7 {
                Arc::new(move |l: &Limits| {
                    Box::new(AdaptivePacer::new(start, l.max_concurrency)) as Box<dyn Pacer>
                })
            } else {
                Arc::new(move |l: &Limits| {
                    Box::new(AimdPacer::with_bounds(
                        f64::from(start),
                        l.max_concurrency.max(8),
                    )) as Box<dyn Pacer>
                })
            };
            faults.push(Faults {
                latency: (rng.random_range(1..=50), rng.random_range(50..=3_000)),
                slow_first_token: fault_rate * 0.2,
                transient: fault_rate * 0.4,
                rate_limited: fault_rate * rng.random_range(0.0..0.6),
                retry_after: rng.random_range(0.0..1.0),
                black_hole: fault_rate * 0.05,
                truncate: fault_rate * 0.1,
                rejected: 0.01,
                invalid: 0.01,
                dead,
                pushback,
                overloaded,
                prefill: false,
            });
            specs.push((breaker, limits, pacer));
        }
        // Continuation from a generator of its own, so the seed's schedule stays what it was.
        let mut continues = SmallRng::seed_from_u64(seed ^ 0x0c0a_7147);
        let continuing = continues.random_bool(0.5);
        config.continuation = crate::runtime::ContinueConfig {
            enabled: continuing,
        };
        for f in &mut faults {
            f.prefill = continues.random_bool(0.7);
            if continuing {
                // Cut streams are what these seeds are about: more of them.
                f.truncate = f.truncate * 4.0 + 0.05;
            }
        }
        let backend_down = rng.random_bool(0.2).then(|| {
            let from = rng.random_range(0..=horizon.max(1));
            (from, from + rng.random_range(100..=20_000))
        });
        let attempt_timeout = rng.random_range(1_000..=20_000);
        let mut arrivals = Vec::new();
        let mut books = Vec::new();
        for c in 0..calls as usize {
            let arrival = rng.random_range(0..=horizon);
            let streaming = rng.random_bool(0.3);
            let cancel_at = rng
                .random_bool(0.15)
                .then(|| arrival + rng.random_range(0..=20_000));
            arrivals.push((arrival, cancel_at));
            let priority = [
                Priority::Interactive,
                Priority::Normal,
                Priority::Normal,
                Priority::Batch,
            ][rng.random_range(0..4usize)];
            let tenant = [None, Some("a"), Some("b")][rng.random_range(0..3usize)].map(Arc::from);
            let weight = rng.random_range(1..=3);
            let deadline = rng
                .random_bool(0.3)
                .then(|| arrival + rng.random_range(200..=30_000));
            books.push(CallBook {
                priority,
                tenant,
                weight,
                deadline,
                ..CallBook::new(seed.wrapping_mul(31).wrapping_add(c as u64), streaming, n)
            });
        }
        let mut state = State::new(
            rng,
            faults,
            attempt_timeout,
            backend_down,
            books,
            keep_trace,
        );
        for (book, open) in state.pacer.iter_mut().zip(opens) {
            book.open = open;
        }
        let picker = (
            Box::new(LeastInflight) as Box<dyn Selector>,
            SmallRng::seed_from_u64(seed ^ 0x5e1e_c702),
            Vec::new(),
        );
        // Hedging from a generator of its own, so the draws above stay what they were per seed.
        let mut hedges = SmallRng::seed_from_u64(seed ^ 0x4ed6_e047);
        if hedges.random_bool(0.5) {
            config.hedge = crate::runtime::HedgeConfig {
                enabled: true,
                floor: Duration::from_millis(hedges.random_range(10..=200)),
                ceiling: Duration::from_millis(hedges.random_range(200..=3_000)),
                budget: [0.05, 0.2, 1.0][hedges.random_range(0..3usize)],
            };
        }
        World::assemble(state, config, specs, picker, arrivals)
    }

    /// The scope over `specs` (breaker, limits, pacer per source), its governance on the memory
    /// backends and a fresh virtual clock.
    fn assemble(
        state: State,
        config: ScopeConfig,
        specs: Vec<(BreakerConfig, Limits, PacerFactory)>,
        picker: (Box<dyn Selector>, SmallRng, Vec<Candidate>),
        arrivals: Vec<(Ms, Option<Ms>)>,
    ) -> Self {
        let clock = Arc::new(ManualClock::new());
        let base = clock.now();
        let room = Arc::new(WaitingRoom::new(clock.clone()));
        let state = Arc::new(Mutex::new(state));
        let mut sources = Vec::new();
        let mut policies = Vec::new();
        for (index, (breaker, limits, pacer)) in specs.into_iter().enumerate() {
            let name: Arc<str> = format!("s{index}").into();
            let initial = pacer(&limits).limit();
            // The first observation is judged against the limit the pacer started with.
            lock(&state).pacer[index].last = Some(initial);
            let shared = Arc::new(SourceShared::new(
                index,
                Arc::clone(&name),
                Arc::new(SimTransport {
                    index,
                    state: Arc::clone(&state),
                }),
                breaker,
                limits,
                100,
                initial,
                base,
                Arc::clone(&room),
                SourceMetrics::new(SCOPE, &name),
            ));
            policies.push(SourcePolicies::start(&pacer, &shared));
            sources.push(shared);
        }
        let gate = Arc::new(MemoryGate::new(clock.clone()));
        let breakers = Arc::new(MemoryBreakers::new(clock.clone()));
        let attempts = crate::ports::attempt::ComposedAttempts::new(
            Arc::clone(&gate) as Arc<dyn GateBackend>,
            Arc::clone(&breakers) as Arc<dyn BreakerBackend>,
        );
        let config_hedge = config.hedge.clone();
        let continuing = crate::runtime::continuation::Continuing::of(SCOPE, &config.continuation);
        World {
            continuing,
            state,
            clock,
            base,
            picker: Mutex::new(picker),
            config,
            sources,
            policies: Mutex::new(policies),
            gate,
            breakers,
            attempts,
            metrics: ScopeMetrics::new(SCOPE),
            room,
            arrivals,
            hedging: crate::runtime::hedge::Hedging::of(SCOPE, &config_hedge),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Move the virtual clock (the memory backends and the cooldown memos read it).
    fn advance_to(&self, t: Ms) {
        let mut state = self.lock();
        if t > state.now {
            self.clock.advance(Duration::from_millis(t - state.now));
            state.now = t;
        }
    }

    /// A governance call the memory backends answer on their first poll.
    fn at_once<R>(future: impl Future<Output = R>) -> R {
        future
            .now_or_never()
            .expect("the memory backends answer without waiting")
    }

    /// After the last event: every call ended, and nothing is held once the TTLs have passed.
    fn check_quiescent(&self) {
        let mut state = self.lock();
        if let Some(call) = (0..state.calls.len()).find(|&c| !state.calls[c].done) {
            state.violation(call, "never finished (hung)".into());
        }
        let last = state.calls.len().saturating_sub(1);
        for s in &self.sources {
            if s.in_flight() != 0 {
                let what = format!("{} leaked {} pacer slots", s.name, s.in_flight());
                state.violation(last, what);
            }
        }
        if state.probes_out != 0 {
            let what = format!("{} probes never handed back", state.probes_out);
            state.violation(last, what);
        }
        if self.room.busy() {
            let what = format!("the waiting room still holds {:?}", self.room.waiting());
            state.violation(last, what);
        }
        // The hedge budget (§5.9): never more hedges than its share of the attempts raced.
        if let Some(hedging) = &self.hedging {
            let hedges: u64 = state.calls.iter().map(|c| u64::from(c.hedges)).sum();
            let allowed = hedging.config.budget * state.races as f64;
            if hedges as f64 > allowed + 1e-9 {
                let what = format!(
                    "{hedges} hedges for {} attempts raced at a budget of {}",
                    state.races, hedging.config.budget
                );
                state.violation(last, what);
            }
        }
        // Without a backend-down window no bookkeeping was lost: every lease was given back
        // when its attempt ended (hedge losers and cancelled calls included), not by its TTL.
        if state.backend_down.is_none() {
            let leases = World::at_once(self.gate.leases_held(SCOPE)).unwrap_or(0);
            if leases != 0 {
                let what = format!("{leases} leases held once every call ended");
                state.violation(last, what);
            }
        }
        let now = state.now;
        drop(state);
        let ttl = ms(self.config.lease_ttl);
        let probe_ttl = self.sources.iter().map(|s| ms(s.breaker.probe_ttl)).max();
        self.advance_to(now + ttl.max(probe_ttl.unwrap_or(0)) + 1);
        let leases = World::at_once(self.gate.leases_held(SCOPE)).unwrap_or(0);
        let mut problems = Vec::new();
        if leases != 0 {
            problems.push(format!("{leases} leases outlive their TTL"));
        }
        for s in &self.sources {
            let snapshot = World::at_once(self.breakers.snapshot(SCOPE, &s.name, &s.breaker));
            if snapshot.is_ok_and(|b| b.probe_held) {
                problems.push(format!("{} holds a probe past its TTL", s.name));
            }
        }
        let mut state = self.lock();
        for p in problems {
            state.violation(last, p);
        }
    }
}

/// The simulator's effects for one call.
struct SimCall {
    world: Rc<World>,
    call: usize,
}

impl SimCall {
    fn sleep(&self, wait: Duration) -> Sleep {
        Sleep::new(Arc::clone(&self.world.state), ms(wait))
    }

    /// Caps of the lease just granted on `source` (per source and scope-wide) to a call of
    /// class `priority`: a batch call is admitted only while the leases held leave the batch
    /// reserve free, so with its own lease they are within the reserve-lowered cap.
    fn check_caps(&self, source: usize, priority: Priority) -> Vec<String> {
        let s = &self.world.sources[source];
        let reserve = self.world.config.batch_reserve;
        let (cap, global_cap) = (
            reserve.limits(s.limits, priority).max_concurrency,
            reserve
                .limits(self.world.config.global, priority)
                .max_concurrency,
        );
        let held = self
            .world
            .gate
            .usage(SCOPE, Some(&s.name))
            .map_or(0, |u| u.leases);
        let all = self.world.gate.usage(SCOPE, None).map_or(0, |u| u.leases);
        let mut problems = Vec::new();
        if cap > 0 && held > u64::from(cap) {
            problems.push(format!(
                "{held} leases on s{source} above its cap {cap} for a {priority} call"
            ));
        }
        if global_cap > 0 && all > u64::from(global_cap) {
            problems.push(format!(
                "{all} leases in the scope above its cap {global_cap} for a {priority} call"
            ));
        }
        problems
    }

    fn epoch_of(&self, source: usize) -> u64 {
        let s = &self.world.sources[source];
        World::at_once(self.world.breakers.snapshot(SCOPE, &s.name, &s.breaker))
            .map_or(0, |b| b.epoch)
    }
}

impl CallEffects<SimTransport> for SimCall {
    type BreakerAnswer = Option<BreakerStatus>;

    fn config(&self) -> &ScopeConfig {
        &self.world.config
    }

    fn sources(&self) -> &[Arc<SourceShared<SimTransport>>] {
        &self.world.sources
    }

    fn metrics(&self) -> &ScopeMetrics {
        &self.world.metrics
    }

    fn now(&self) -> Instant {
        self.world.clock.now()
    }

    fn rng(&self) -> SmallRng {
        SmallRng::seed_from_u64(self.world.lock().calls[self.call].seed)
    }

    fn new_id(&self) -> String {
        let mut state = self.world.lock();
        state.ids += 1;
        format!("{}", state.ids)
    }

    async fn select(
        &self,
        exclude: Vec<usize>,
        avoid: Option<usize>,
    ) -> Result<Selection<SimTransport>, String> {
        let now = self.now();
        let selection = {
            let mut picker = self.world.picker.lock().unwrap_or_else(|e| e.into_inner());
            let (selector, rng, candidates) = &mut *picker;
            Picker {
                selector: selector.as_mut(),
                rng,
                candidates,
            }
            .select(self.world.sources.iter(), now, &exclude, avoid)
        };
        let mut state = self.world.lock();
        if let Selection::Picked(ticket) = &selection {
            let s = ticket.source();
            if s.in_flight() > s.pacer_limit() {
                let what = format!(
                    "{} in flight above its pacer limit {}",
                    s.name,
                    s.pacer_limit()
                );
                state.violation(self.call, what);
            }
        }
        // Only sources at their own concurrency limit stood in the way of a fail-fast call: its
        // next step must end it `quota_exhausted` (checked in `check_call`). A hedge's selection
        // (while the call's attempt is sent) is no step of the machine's.
        let hedge = state.calls[self.call].sending.is_some();
        state.calls[self.call].capped_only = !hedge
            && matches!(
                selection,
                Selection::NoneEligible {
                    paced: false,
                    capped: true,
                    ..
                }
            )
            && self.world.config.quota_full_fails_fast;
        state.trace_event(self.call, || match &selection {
            Selection::Picked(t) => format!("picked {}", t.source().name),
            Selection::NoneEligible {
                earliest_cooling,
                paced,
                capped,
                ..
            } => format!(
                "none eligible (cooling {earliest_cooling:?}, paced {paced}, capped {capped})"
            ),
        });
        Ok(selection)
    }

    async fn admit(&self, request: AdmitRequest) -> AdmitAnswer {
        let source = self
            .world
            .sources
            .iter()
            .position(|s| s.name == request.gate.source)
            .expect("a source of the scope");
        if self.world.lock().down() {
            return Err(BackendError::new("simulated backend down"));
        }
        let answer = World::at_once(self.world.attempts.admit(&request.gate, &request.breaker));
        let epoch = self.epoch_of(source);
        let priority = self.world.lock().calls[self.call].priority;
        let caps = match &answer {
            Ok(AttemptAdmit::Admitted(_)) => self.check_caps(source, priority),
            _ => Vec::new(),
        };
        let mut state = self.world.lock();
        let now = state.now;
        let call = self.call;
        state.check_epoch(call, source, epoch);
        // An admission while the machine's attempt is being sent is a hedge's (§5.9): it is
        // no attempt of the machine's, and what it learns is not the machine's to know.
        let hedge = state.calls[call].sending.is_some();
        if hedge {
            // Or a continuation's (§5.10), never on the source that cut the stream.
            let continuing = state.calls[call].continuing;
            let beside = continuing.or(state.calls[call].sending);
            if beside == Some(source) {
                let what = format!("a hedge or continuation of s{source} on s{source} itself");
                state.violation(call, what);
            }
            if let Ok(AttemptAdmit::Admitted(permit)) = &answer {
                if permit.probe_id.is_some() {
                    state.probes_out += 1;
                }
                if continuing.is_some() {
                    state.calls[call].continuations += 1;
                } else {
                    state.calls[call].hedges += 1;
                }
                for p in caps {
                    state.violation(call, p);
                }
            }
            state.trace_event(call, || format!("hedge {answer:?}"));
            return answer;
        }
        match &answer {
            Ok(AttemptAdmit::Admitted(permit)) => {
                if permit.probe_id.is_some() {
                    state.probes_out += 1;
                }
                state.calls[call].granted += 1;
                for p in caps {
                    state.violation(call, p);
                }
                if let Some(dead) = state.dead_seen[source] {
                    let cooldown = ms(self.world.sources[source].breaker.cooldown);
                    if now < dead + cooldown {
                        let what = format!(
                            "dead key s{source} admitted {} ms after it answered dead (cooldown {cooldown} ms)",
                            now - dead
                        );
                        state.violation(call, what);
                    }
                }
            }
            Ok(AttemptAdmit::BreakerRefused {
                state: b,
                retry_after,
            }) => {
                if *b == BreakerState::Open {
                    let known = &mut state.calls[call].known_ready[source];
                    *known = (*known).max(now + ms(*retry_after));
                }
            }
            Ok(AttemptAdmit::GateRefused { gate, retry_after }) => {
                let ready = now + ms(*retry_after);
                let known = &mut state.calls[call].known_ready;
                if gate.is_global() {
                    known.iter_mut().for_each(|k| *k = (*k).max(ready));
                } else {
                    known[source] = known[source].max(ready);
                }
            }
            Err(_) => {}
        }
        state.trace_event(call, || format!("{answer:?}"));
        answer
    }

    fn send<'a>(
        &'a self,
        source: &'a SourceShared<SimTransport>,
        request: &'a SimRequest,
        events: Option<&'a EventSink<u64>>,
    ) -> impl Future<Output = Result<(), SimError>> + 'a {
        source.transport.send(request, events)
    }

    fn settle(
        &self,
        permit: Permit,
        outcome: AttemptOutcome,
        answer: bool,
    ) -> Option<Option<BreakerStatus>> {
        let source = permit.attempt.lease.source.clone();
        let index = self
            .world
            .sources
            .iter()
            .position(|s| s.name == source)
            .expect("a source of the scope");
        let down = {
            let mut state = self.world.lock();
            if permit.attempt.probe_id.is_some() {
                state.probes_out -= 1;
            }
            state.down()
        };
        if down {
            // Lost with the backend: the lease and probe TTLs reclaim them.
            return answer.then_some(None);
        }
        let status = World::at_once(self.world.attempts.finish(
            &permit.attempt,
            &permit.breaker,
            outcome,
        ))
        .ok();
        let epoch = self.epoch_of(index);
        let mut state = self.world.lock();
        state.check_epoch(self.call, index, epoch);
        if let Some(BreakerStatus::Open { retry_after }) = status {
            let now = state.now;
            let known = &mut state.calls[self.call].known_ready[index];
            *known = (*known).max(now + ms(retry_after));
        }
        answer.then_some(status)
    }

    async fn breaker_after(&self, answer: Option<BreakerStatus>) -> Option<BreakerStatus> {
        answer
    }

    fn report(&self, source: &SourceShared<SimTransport>, observation: PacerObservation) {
        // As the production call task does: count, then the source's policies hear of it (here
        // at once, where the source actor would handle the cast a moment later).
        source.report(observation);
        let limit = {
            let mut policies = self
                .world
                .policies
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let policies = &mut policies[source.index];
            policies.observe(source, &observation);
            policies.pacer.limit()
        };
        self.world
            .lock()
            .check_pacer(self.call, source.index, limit, &observation);
    }

    async fn backoff(&self, wait: Duration) {
        self.sleep(wait).await;
    }

    async fn wait(&self, wait: Duration) {
        self.sleep(wait).await;
    }

    fn room(&self) -> &WaitingRoom {
        &self.world.room
    }

    async fn progress(&self) -> Option<Duration> {
        let age = if self.world.lock().down() {
            None
        } else {
            World::at_once(self.world.gate.progress_age(SCOPE))
                .ok()
                .flatten()
        };
        self.world.lock().calls[self.call].last_progress = Some(age);
        age
    }

    fn on_step(&self, step: &Step, machine: &CallMachine) {
        let waiting = match step.action {
            Action::Send { .. } => self.world.room.waiting(),
            _ => Vec::new(),
        };
        let mut state = self.world.lock();
        state.steps += 1;
        state.calls[self.call].attempts = machine.attempts();
        state.record(self.call, step, self.world.base);
        state.check_call(self.call, &step.action, machine, &self.world.config);
        state.calls[self.call].sending = None;
        state.calls[self.call].continuing = None;
        if let Action::Send { source, .. } = step.action {
            state.check_send(self.call, &waiting);
            state.calls[self.call].sending = Some(source);
            state.races += u64::from(self.world.hedging.is_some());
        }
    }

    fn hedging(&self) -> Option<&crate::runtime::hedge::Hedging> {
        self.world.hedging.as_ref()
    }

    fn continuing(&self) -> Option<&crate::runtime::continuation::Continuing> {
        self.world.continuing.as_ref()
    }

    /// The invariant of §5.10: a continuation is never spliced after a tool call's piece.
    fn on_continuation(&self, cut: usize) {
        let mut state = self.world.lock();
        if state.calls[self.call].tool_delta[cut] {
            let what = format!("a continuation of s{cut}'s stream after its tool-call delta");
            state.violation(self.call, what);
        }
        if !state.calls[self.call].streaming {
            state.violation(
                self.call,
                "a continuation of a call that does not stream".into(),
            );
        }
        state.calls[self.call].continuing = Some(cut);
        state.trace_event(self.call, || format!("continue s{cut}'s cut stream"));
    }
}

/// What the simulator hears from the driver per attempt: the telemetry rows it checks.
struct SimObserver {
    state: Arc<Mutex<State>>,
    /// Per source, its name and breaker cooldown.
    sources: Vec<(Arc<str>, Ms)>,
    call: usize,
}

impl CallObserver<SimTransport> for SimObserver {
    fn on_attempt(&self, report: &AttemptReport<'_, SimTransport>) {
        let (source, cooldown) = self
            .sources
            .iter()
            .enumerate()
            .find(|(_, (name, _))| **name == *report.source)
            .map(|(i, (_, cooldown))| (i, *cooldown))
            .expect("a source of the scope");
        let mut state = lock(&self.state);
        let now = state.now;
        let call = self.call;
        state.calls[call].rows += 1;
        #[cfg(test)]
        {
            let result = match &report.result {
                AttemptResult::Ok(()) => "ok".to_string(),
                AttemptResult::Err(error) => error.to_string(),
                AttemptResult::Cancelled => "cancelled".to_string(),
                AttemptResult::HedgeCancelled => "hedge_cancelled".to_string(),
            };
            state.calls[call]
                .log
                .push((report.source.to_string(), result));
        }
        let sending = state.calls[call].sending;
        // A hedge's row, or a continuation's: no attempt of the machine's.
        let hedge_row =
            sending.is_some_and(|s| s != source) || state.calls[call].continuing.is_some();
        if let AttemptResult::HedgeCancelled = &report.result {
            if sending.is_none() {
                state.violation(call, "a hedge_cancelled row outside a hedged send".into());
            }
        }
        if let (false, AttemptResult::Err(error)) = (hedge_row, &report.result) {
            if error.rate_limited {
                state.calls[call].pushbacks += 1;
            }
            let mut ready = now;
            if let Some(hint) = error.retry_after {
                ready = ready.max(now + ms(hint));
            }
            if error.class == FailureClass::SourceDead {
                state.dead_seen[source] = Some(now);
                ready = ready.max(now + cooldown);
            }
            let known = &mut state.calls[call].known_ready[source];
            *known = (*known).max(ready);
        }
    }

    fn on_terminal(&self, _report: &TerminalReport<'_, SimError>) {
        lock(&self.state).calls[self.call].terminal_rows += 1;
    }
}

/// One call, as a caller makes it: a streaming call brings its consumer.
async fn one_call(world: Rc<World>, call: usize) {
    let streaming = world.lock().calls[call].streaming;
    let request = SimRequest {
        call,
        streaming,
        continues_from: None,
    };
    let (sink, _consumer) = match streaming {
        true => {
            let (sink, consumer) = EventSink::channel(64);
            (Some(sink), Some(consumer))
        }
        false => (None, None),
    };
    let options = {
        let state = world.lock();
        let c = &state.calls[call];
        CallOptions {
            priority: c.priority,
            deadline: c
                .deadline
                .map(|d| Duration::from_millis(d.saturating_sub(state.now))),
            tenant: c.tenant.clone(),
            weight: c.weight,
            ..CallOptions::default()
        }
    };
    let effects = SimCall {
        world: Rc::clone(&world),
        call,
    };
    let observer = SimObserver {
        state: Arc::clone(&world.state),
        sources: world
            .sources
            .iter()
            .map(|s| (Arc::clone(&s.name), ms(s.breaker.cooldown)))
            .collect(),
        call,
    };
    let result = driver::run(&effects, &request, &observer, sink.as_ref(), options).await;
    world.finished(call, &result);
}

impl World {
    /// The call returned: its telemetry rows, sends and `retry_after` hint.
    fn finished(
        &self,
        call: usize,
        result: &Result<crate::runtime::Governed<()>, CallFailure<SimError>>,
    ) {
        let mut state = self.lock();
        let now = state.now;
        let c = &mut state.calls[call];
        c.done = true;
        #[cfg(test)]
        {
            c.ending = Some(result.as_ref().map_or_else(CallFailure::kind, |_| "ok"));
        }
        let attempts = c.attempts;
        let unavailable = matches!(result, Err(CallFailure::Unavailable { .. }));
        let expected_terminal = u32::from(c.sends == 0 && unavailable);
        // Each hedge and continuation admitted is sent once and leaves one row (§5.9, §5.10).
        let sent = attempts + c.hedges + c.continuations;
        if c.rows != sent || c.sends != sent || c.terminal_rows != expected_terminal {
            let what = format!(
                "{} attempt rows, {} terminal rows and {} sends for {attempts} attempts, {} \
                 hedges and {} continuations",
                c.rows, c.terminal_rows, c.sends, c.hedges, c.continuations
            );
            state.violation(call, what);
        }
        if let Err(CallFailure::Unavailable {
            reason,
            retry_after,
            ..
        }) = result
        {
            let floor = state.calls[call]
                .known_ready
                .iter()
                .map(|r| r.saturating_sub(now))
                .min()
                .unwrap_or(0);
            let checked = !matches!(
                reason,
                ScopeReason::NoSources | ScopeReason::GovernanceBackendDown
            );
            if checked && ms(*retry_after) < floor {
                let what = format!(
                    "{} with retry_after {} ms, but no source can serve for {floor} ms",
                    reason.as_str(),
                    ms(*retry_after)
                );
                state.violation(call, what);
            }
        }
    }
}

/// Wakes one call: its index goes on the executor's ready queue.
struct CallWaker {
    call: usize,
    ready: Arc<Mutex<VecDeque<usize>>>,
}

impl Wake for CallWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(self.call);
    }
}

/// A call in progress: the driver's future.
type Running = Pin<Box<dyn Future<Output = ()>>>;

/// The single-threaded virtual-time executor: it polls the woken calls in the order they were
/// woken, and when none is ready moves the clock to the next timer (ties in the order they were
/// set). Nothing else decides the order, so a seed replays exactly.
struct Executor {
    world: Rc<World>,
    ready: Arc<Mutex<VecDeque<usize>>>,
    running: Vec<Option<Running>>,
    wakers: Vec<Waker>,
}

impl Executor {
    fn new(world: Rc<World>) -> Self {
        let ready = Arc::new(Mutex::new(VecDeque::new()));
        let calls = world.arrivals.len();
        {
            let mut state = world.lock();
            for (call, &(arrival, cancel)) in world.arrivals.iter().enumerate() {
                state.timer(arrival, Timer::Start(call));
                if let Some(at) = cancel {
                    state.timer(at, Timer::Cancel(call));
                }
            }
        }
        let wakers = (0..calls)
            .map(|call| {
                Waker::from(Arc::new(CallWaker {
                    call,
                    ready: Arc::clone(&ready),
                }))
            })
            .collect();
        Self {
            world,
            ready,
            running: (0..calls).map(|_| None).collect(),
            wakers,
        }
    }

    fn run(&mut self) {
        loop {
            while let Some(call) = self.next_ready() {
                self.poll(call);
            }
            let next = {
                let mut state = self.world.lock();
                if state.steps > STEP_LIMIT {
                    let call = state.calls.iter().position(|c| !c.done).unwrap_or(0);
                    state.violation(call, format!("runaway: more than {STEP_LIMIT} steps"));
                    return;
                }
                state.timers.pop().map(|Reverse((at, seq))| {
                    let timer = state.timer_payloads.remove(&seq);
                    (at, timer.expect("every timer has a payload"))
                })
            };
            let Some((at, timer)) = next else {
                return;
            };
            self.world.advance_to(at);
            match timer {
                Timer::Wake(waker) => waker.wake(),
                Timer::Start(call) => self.start(call),
                Timer::Cancel(call) => self.cancel(call),
            }
        }
    }

    fn next_ready(&self) -> Option<usize> {
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }

    fn start(&mut self, call: usize) {
        {
            let now = self.world.clock.now();
            let cooling: Vec<Ms> = self
                .world
                .sources
                .iter()
                .map(|s| {
                    s.cooling_until(now)
                        .map_or(0, |t| ms(t.saturating_duration_since(self.world.base)))
                })
                .collect();
            self.world.lock().calls[call].known_ready = cooling;
        }
        self.running[call] = Some(Box::pin(one_call(Rc::clone(&self.world), call)));
        self.poll(call);
    }

    fn poll(&mut self, call: usize) {
        let Some(running) = self.running[call].as_mut() else {
            return;
        };
        let mut cx = Context::from_waker(&self.wakers[call]);
        // One call runs at a time, so an arrival number the room hands out during this poll is
        // this call's: its place, for the order invariant.
        let taken = self.world.room.arrivals_taken();
        let ready = running.as_mut().poll(&mut cx).is_ready();
        if self.world.room.arrivals_taken() > taken {
            self.world.lock().calls[call].place = Some(taken);
        }
        if ready {
            self.running[call] = None;
        }
    }

    /// The caller dropped its future: the driver's guards release everything, an attempt in
    /// flight is recorded `cancelled`, and no retry continues.
    fn cancel(&mut self, call: usize) {
        let Some(running) = self.running[call].take() else {
            return;
        };
        {
            let mut state = self.world.lock();
            state.trace_event(call, || "cancelled by the caller".into());
        }
        drop(running);
        let mut state = self.world.lock();
        let c = &mut state.calls[call];
        c.done = true;
        // A cancelled attempt still leaves its row; nothing else is owed.
        if c.rows != c.sends {
            let what = format!(
                "{} attempt rows for {} sends after cancellation",
                c.rows, c.sends
            );
            state.violation(call, what);
        }
    }
}

/// Attempts of a scripted call, as its observer saw them: (source, result).
#[cfg(test)]
type AttemptLog = Vec<(String, String)>;

/// One call through the simulator on a scripted schedule: `sources` sources (default breakers,
/// no limits, AIMD pacers, round-robin selection) whose attempts answer `script` in order (then
/// `Ok`), 10 ms each. Returns the attempts, how the call ended, and any broken invariant.
#[cfg(test)]
fn run_script(
    config: ScopeConfig,
    sources: usize,
    script: Vec<Answer>,
) -> (AttemptLog, &'static str, Vec<String>) {
    let book = CallBook::new(1, false, sources);
    let faults = (0..sources)
        .map(|_| Faults {
            latency: (SCRIPT_LATENCY, SCRIPT_LATENCY),
            slow_first_token: 0.0,
            transient: 0.0,
            rate_limited: 0.0,
            retry_after: 0.0,
            black_hole: 0.0,
            truncate: 0.0,
            rejected: 0.0,
            invalid: 0.0,
            dead: None,
            pushback: None,
            overloaded: None,
            prefill: false,
        })
        .collect();
    let mut state = State::new(
        SmallRng::seed_from_u64(0),
        faults,
        60_000,
        None,
        vec![book],
        true,
    );
    state.script = Some(script.into());
    let specs = (0..sources)
        .map(|_| {
            (
                BreakerConfig::default(),
                Limits::default(),
                crate::testkit::aimd(),
            )
        })
        .collect();
    let picker = (
        Box::new(crate::policy::select::RoundRobin::default()) as Box<dyn Selector>,
        SmallRng::seed_from_u64(0),
        Vec::new(),
    );
    let world = Rc::new(World::assemble(
        state,
        config,
        specs,
        picker,
        vec![(0, None)],
    ));
    Executor::new(Rc::clone(&world)).run();
    world.check_quiescent();
    let mut state = world.lock();
    let violations = state.violations.iter().map(|(_, v)| v.clone()).collect();
    let call = &mut state.calls[0];
    let ending = call.ending.unwrap_or("never returned");
    (std::mem::take(&mut call.log), ending, violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{Runtime, RuntimeOptions, SourceSpec};

    /// The production transport on the same script: each attempt answers the next entry.
    #[derive(Debug)]
    struct Scripted(Arc<Mutex<VecDeque<Answer>>>);

    #[async_trait::async_trait]
    impl Transport for Scripted {
        type Request = ();
        type Response = ();
        type Event = u64;
        type Error = SimError;

        async fn send(&self, _: &(), _: Option<&EventSink<u64>>) -> Result<(), SimError> {
            tokio::time::sleep(Duration::from_millis(SCRIPT_LATENCY)).await;
            let answer = self.0.lock().unwrap().pop_front();
            match answer.unwrap_or(Answer::Ok) {
                Answer::Ok => Ok(()),
                Answer::Fail(error) => Err(error),
            }
        }

        fn tokens_used(_: &()) -> Option<u64> {
            None
        }
    }

    #[derive(Default)]
    struct Log(Mutex<AttemptLog>);

    impl CallObserver<Scripted> for Log {
        fn on_attempt(&self, report: &AttemptReport<'_, Scripted>) {
            let result = match &report.result {
                AttemptResult::Ok(()) => "ok".to_string(),
                AttemptResult::Err(error) => error.to_string(),
                AttemptResult::Cancelled => "cancelled".to_string(),
                AttemptResult::HedgeCancelled => "hedge_cancelled".to_string(),
            };
            self.0
                .lock()
                .unwrap()
                .push((report.source.to_string(), result));
        }
        fn on_terminal(&self, _: &TerminalReport<'_, SimError>) {}
    }

    /// The same script through the production runtime (actors, tokio, paused time).
    async fn run_production(
        config: ScopeConfig,
        sources: usize,
        script: Vec<Answer>,
    ) -> (AttemptLog, &'static str) {
        let runtime = Runtime::start(
            crate::testkit::memory_governance(),
            RuntimeOptions::default(),
        )
        .await
        .unwrap();
        let answers = Arc::new(Mutex::new(VecDeque::from(script)));
        let specs = (0..sources)
            .map(|i| SourceSpec {
                name: format!("s{i}").into(),
                transport: Arc::new(Scripted(Arc::clone(&answers))),
                breaker: BreakerConfig::default(),
                limits: Limits::default(),
                est_tokens: 100,
            })
            .collect();
        let scope = runtime
            .add_scope(
                config,
                specs,
                Box::new(crate::policy::select::RoundRobin::default()),
                crate::testkit::aimd(),
            )
            .await
            .unwrap();
        let log = Log::default();
        let result = scope.call(&(), &log, None, CallOptions::default()).await;
        runtime.shutdown(Duration::from_secs(1)).await;
        let ending = result.as_ref().map_or_else(CallFailure::kind, |_| "ok");
        (log.0.into_inner().unwrap(), ending)
    }

    fn error(class: FailureClass, reason: SourceReason, retry_after: Option<u64>) -> Answer {
        Answer::Fail(SimError {
            class,
            reason,
            rate_limited: reason == SourceReason::RateLimited,
            retry_after: retry_after.map(Duration::from_millis),
            cut: None,
        })
    }

    /// Same events in, same attempts and ending out: the simulator and production run the same
    /// driver, so they must agree on every scripted schedule.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn production_and_the_simulator_agree_on_scripted_schedules() {
        use FailureClass::{RequestRejected, SourceDead, Transient};
        use SourceReason::{NetworkError, RateLimited, Timeout};
        let scripts = [
            // A 429 with Retry-After, a 503, a dead key, then an answer.
            vec![
                error(Transient, RateLimited, Some(300)),
                error(Transient, NetworkError, None),
                error(SourceDead, SourceReason::SourceDead, None),
            ],
            // The budget spent on transient failures.
            vec![
                error(Transient, Timeout, None),
                error(Transient, NetworkError, Some(50)),
                error(Transient, Timeout, None),
                error(Transient, NetworkError, None),
            ],
            // A rejected request ends the call at once.
            vec![error(RequestRejected, NetworkError, None)],
        ];
        for (i, script) in scripts.into_iter().enumerate() {
            let mut config = ScopeConfig::new(SCOPE);
            config.max_attempts = 3;
            config.backoff_base = Duration::from_millis(100);
            config.backoff_max = Duration::from_secs(1);
            let (sim_log, sim_ending, violations) = run_script(config.clone(), 3, script.clone());
            assert!(violations.is_empty(), "script {i}: {violations:?}");
            let (prod_log, prod_ending) = run_production(config, 3, script).await;
            assert!(!prod_log.is_empty(), "script {i}: no attempt made");
            assert_eq!(sim_log, prod_log, "script {i}: attempts differ");
            assert_eq!(sim_ending, prod_ending, "script {i}: endings differ");
        }
    }
}
