//! Deterministic simulation of governed calls (the FoundationDB / VOPR idea, at the scale of
//! one scope): the real call machine (`runtime/machine.rs`), the real breaker and limiter state
//! machines and the real selector, driven by a seeded fault process in virtual time. No tokio,
//! no threads, no clock: one seed is one schedule, replayed exactly, and every step checks the
//! invariants listed in `ARCHITECTURE.md` ("Simulation").
//!
//! What is modelled per seed: 1–4 sources with latency distributions, 429 bursts with and
//! without Retry-After, dead-key windows that recover, black holes (cut by the attempt
//! watchdog), mid-stream truncation, slow first tokens, per-source and scope gates; a
//! governance "backend down" window (an admission actor restarting or Redis away: admits fail
//! closed, bookkeeping sent meanwhile is lost and the lease/probe TTLs reclaim it); random caller
//! cancellations at any point. Not modelled: the actors' mailboxes and restarts themselves
//! (their effect on a call is the backend-down window) and the health EWMA / AIMD adaptation
//! (pacer limits are fixed per seed).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::outcome::{AttemptVerdict, FailureClass, SourceReason};
use crate::policy::breaker::BreakerMachine;
use crate::policy::limiter::LimiterState;
use crate::policy::select::{Candidate, LeastInflight, Selector};
use crate::ports::attempt::{BreakerAction, BreakerStatus};
use crate::ports::breaker::{BreakerAdmit, BreakerConfig, BreakerState};
use crate::ports::gate::{GateDecision, GateRequest, Lease, Limits};
use crate::runtime::machine::{
    settlement, Action, Admission, CallMachine, Ending, Event, Failure, Outcome, Selected,
    SourceFacts, Step,
};
use crate::runtime::{ScopeConfig, ScopeReason};

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
    let mut world = World::new(seed, calls, keep_trace);
    world.run();
    let trace = world
        .violations
        .first()
        .map(|(call, _)| world.calls[*call].trace.clone())
        .unwrap_or_default();
    SeedReport {
        seed,
        calls,
        steps: world.steps,
        violations: world.violations.into_iter().map(|(_, v)| v).collect(),
        trace_hash: world.hash,
        trace,
    }
}

/// Virtual milliseconds since the start of the seed.
type Ms = u64;

const SCOPE: &str = "sim";
/// Past this many steps a seed is a runaway (a call loops without time passing).
const STEP_LIMIT: u64 = 2_000_000;

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
}

#[derive(Debug)]
struct SimSource {
    name: Arc<str>,
    breaker: BreakerMachine,
    breaker_config: BreakerConfig,
    limits: Limits,
    pacer_limit: u32,
    in_flight: u32,
    /// The local cooldown memo (what `SourceShared::cool_until` writes).
    cooling_until: Ms,
    faults: Faults,
    /// When this source last answered "dead key" (for the dead-key invariant).
    dead_seen: Option<Ms>,
    epoch: u64,
}

#[derive(Debug)]
struct SimPermit {
    source: usize,
    lease: Lease,
    epoch: u64,
    probe: Option<Arc<str>>,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Ok,
    Fail(Failure),
}

#[derive(Debug)]
struct SimCall {
    /// Built when the call arrives (it reads the cooldown memo then).
    machine: Option<CallMachine>,
    seed: u64,
    streaming: bool,
    generation: u64,
    pending: Option<Event>,
    /// Pacer slot held (source index).
    ticket: Option<usize>,
    permit: Option<SimPermit>,
    /// The attempt in flight: its source and what it will answer.
    attempt: Option<(usize, Kind)>,
    awaiting_slot: bool,
    done: bool,
    // Bookkeeping kept independently of the machine, for the invariants.
    granted: u32,
    pushbacks: u32,
    rows: u32,
    sends: u32,
    /// Per source, the earliest moment it could serve as far as this call has been told.
    known_ready: Vec<Ms>,
    last_progress: Option<Option<Duration>>,
    trace: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Wake {
    Start,
    Deliver(u64),
    Cancel,
}

struct World {
    base: Instant,
    now: Ms,
    rng: SmallRng,
    selector_rng: SmallRng,
    config: ScopeConfig,
    attempt_timeout: Ms,
    sources: Vec<SimSource>,
    limiter: LimiterState,
    backend_down: Option<(Ms, Ms)>,
    calls: Vec<SimCall>,
    queue: BinaryHeap<Reverse<(Ms, u64, usize, Wake)>>,
    seq: u64,
    slot_waiters: VecDeque<usize>,
    ids: u64,
    probes_out: i64,
    steps: u64,
    hash: u64,
    keep_trace: bool,
    violations: Vec<(usize, String)>,
}

fn fnv(hash: u64, value: u64) -> u64 {
    value.to_le_bytes().iter().fold(hash, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn ms(d: Duration) -> Ms {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
        let horizon: Ms = u64::from(calls) * rng.random_range(20..=400);
        let sources = (0..n)
            .map(|i| {
                let fault_rate = [0.0, 0.05, 0.3, 0.8][rng.random_range(0..4usize)];
                let dead = rng.random_bool(0.25).then(|| {
                    let from = rng.random_range(0..=horizon.max(1));
                    (from, from + rng.random_range(1_000..=120_000))
                });
                SimSource {
                    name: format!("s{i}").into(),
                    breaker: BreakerMachine::new(),
                    breaker_config: BreakerConfig {
                        fail_threshold: rng.random_range(1..=6),
                        cooldown: Duration::from_millis(rng.random_range(500..=30_000)),
                        max_cooldown: Duration::from_secs(60),
                        probe_ttl: Duration::from_secs(30),
                        min_calls: rng.random_range(3..=10),
                        ..BreakerConfig::default()
                    },
                    limits: Limits {
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
                    },
                    pacer_limit: rng.random_range(1..=8),
                    in_flight: 0,
                    cooling_until: 0,
                    faults: Faults {
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
                    },
                    dead_seen: None,
                    epoch: 0,
                }
            })
            .collect();
        let backend_down = rng.random_bool(0.2).then(|| {
            let from = rng.random_range(0..=horizon.max(1));
            (from, from + rng.random_range(100..=20_000))
        });
        let mut world = World {
            base: Instant::now(),
            now: 0,
            selector_rng: SmallRng::seed_from_u64(seed ^ 0x5e1e_c702),
            attempt_timeout: rng.random_range(1_000..=20_000),
            config,
            sources,
            limiter: LimiterState::new(Duration::from_secs(60)),
            backend_down,
            calls: Vec::new(),
            queue: BinaryHeap::new(),
            seq: 0,
            slot_waiters: VecDeque::new(),
            ids: 0,
            probes_out: 0,
            steps: 0,
            hash: 0xcbf2_9ce4_8422_2325,
            keep_trace,
            violations: Vec::new(),
            rng,
        };
        for c in 0..calls as usize {
            let arrival = world.rng.random_range(0..=horizon);
            let streaming = world.rng.random_bool(0.3);
            let cancel_at = world
                .rng
                .random_bool(0.15)
                .then(|| arrival + world.rng.random_range(0..=20_000));
            world.calls.push(SimCall {
                machine: None,
                seed: seed.wrapping_mul(31).wrapping_add(c as u64),
                streaming,
                generation: 0,
                pending: None,
                ticket: None,
                permit: None,
                attempt: None,
                awaiting_slot: false,
                done: false,
                granted: 0,
                pushbacks: 0,
                rows: 0,
                sends: 0,
                known_ready: vec![0; n],
                last_progress: None,
                trace: Vec::new(),
            });
            world.push(arrival, c, Wake::Start);
            if let Some(at) = cancel_at {
                world.push(at, c, Wake::Cancel);
            }
        }
        world
    }

    fn machine(&mut self, call: usize) -> &mut CallMachine {
        self.calls[call]
            .machine
            .as_mut()
            .expect("the call has arrived")
    }

    fn at(&self, t: Ms) -> Instant {
        self.base + Duration::from_millis(t)
    }

    fn push(&mut self, at: Ms, call: usize, wake: Wake) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, call, wake)));
    }

    fn deliver_later(&mut self, call: usize, after: Ms, event: Event) {
        let c = &mut self.calls[call];
        c.generation += 1;
        c.pending = Some(event);
        let generation = c.generation;
        self.push(self.now + after, call, Wake::Deliver(generation));
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

    fn run(&mut self) {
        while let Some(Reverse((at, _, call, wake))) = self.queue.pop() {
            self.now = at;
            if self.calls[call].done {
                continue;
            }
            match wake {
                Wake::Start => {
                    let facts: Vec<SourceFacts> = self
                        .sources
                        .iter()
                        .map(|s| SourceFacts {
                            cooldown: s.breaker_config.cooldown,
                            cooling_until: (s.cooling_until > self.now)
                                .then(|| self.at(s.cooling_until)),
                        })
                        .collect();
                    for (i, s) in self.sources.iter().enumerate() {
                        self.calls[call].known_ready[i] = s.cooling_until;
                    }
                    let rng = SmallRng::seed_from_u64(self.calls[call].seed);
                    let machine = CallMachine::new(&self.config, facts, rng, self.at(self.now));
                    let step = self.calls[call].machine.insert(machine).start();
                    self.drive(call, step);
                }
                Wake::Deliver(generation) if generation == self.calls[call].generation => {
                    let event = self.calls[call].pending.take().expect("a pending event");
                    let event = self.before_delivery(call, event);
                    self.step(call, event);
                }
                Wake::Deliver(_) => {}
                Wake::Cancel => self.cancel(call),
            }
            if self.steps > STEP_LIMIT {
                self.violation(call, format!("runaway: more than {STEP_LIMIT} steps"));
                return;
            }
        }
        self.check_quiescent();
    }

    /// What the driver does when an attempt ends, before the machine hears of it: the guard
    /// settles with admission, the pacer slot goes back, the observer writes a row.
    fn before_delivery(&mut self, call: usize, event: Event) -> Event {
        self.calls[call].awaiting_slot = false;
        let Event::Attempted(outcome) = event else {
            return event;
        };
        let (source, kind) = self.calls[call]
            .attempt
            .take()
            .expect("an attempt in flight");
        let est = self.calls[call]
            .permit
            .as_ref()
            .map_or(0, |p| p.lease.est_tokens);
        let answer = match kind {
            Kind::Ok => Ok(None),
            Kind::Fail(f) => {
                let verdict = if f.rate_limited {
                    AttemptVerdict::RateLimited
                } else {
                    match f.class {
                        FailureClass::Transient => AttemptVerdict::Failure,
                        FailureClass::SourceDead => AttemptVerdict::Dead,
                        _ => AttemptVerdict::AliveButUnusable,
                    }
                };
                Err((verdict, f.class))
            }
        };
        let (action, tokens) = settlement(answer, est, false);
        let breaker = self.settle(call, action, tokens, matches!(kind, Kind::Ok));
        self.release_ticket(call);
        let c = &mut self.calls[call];
        c.rows += 1;
        if let Kind::Fail(f) = kind {
            if f.rate_limited {
                c.pushbacks += 1;
            }
            if f.class == FailureClass::SourceDead {
                self.sources[source].dead_seen = Some(self.now);
            }
            let mut ready = self.now;
            if let Some(hint) = f.retry_after {
                ready = ready.max(self.now + ms(hint));
            }
            if f.class == FailureClass::SourceDead {
                ready = ready.max(self.now + ms(self.sources[source].breaker_config.cooldown));
            }
            if let Some(BreakerStatus::Open { retry_after }) = breaker {
                ready = ready.max(self.now + ms(retry_after));
            }
            let known = &mut self.calls[call].known_ready[source];
            *known = (*known).max(ready);
        }
        // As the driver does: the failure carries the breaker state its finish answered.
        match outcome {
            Outcome::Failed(failure) => {
                Event::Attempted(Outcome::Failed(Failure { breaker, ..failure }))
            }
            Outcome::Ok => Event::Attempted(Outcome::Ok),
        }
    }

    fn step(&mut self, call: usize, event: Event) {
        let now = self.at(self.now);
        let step = self.machine(call).step(event, now);
        self.drive(call, step);
    }

    fn drive(&mut self, call: usize, mut step: Step) {
        loop {
            self.steps += 1;
            self.record(call, &step);
            self.check_call(call, &step.action);
            if let Some((source, until)) = step.cool {
                let until = ms(until.saturating_duration_since(self.base));
                let memo = &mut self.sources[source].cooling_until;
                *memo = (*memo).max(until);
            }
            let event = match step.action {
                Action::Select { exclude, avoid } => {
                    Event::Selected(self.select(call, &exclude, avoid))
                }
                Action::Admit { source } => Event::Admission(self.admit(call, source)),
                Action::Send { source, .. } => {
                    let (after, kind) = self.plan_attempt(call, source);
                    self.calls[call].attempt = Some((source, kind));
                    self.calls[call].sends += 1;
                    let outcome = match kind {
                        Kind::Ok => Outcome::Ok,
                        Kind::Fail(f) => Outcome::Failed(f),
                    };
                    self.deliver_later(call, after, Event::Attempted(outcome));
                    return;
                }
                Action::Backoff(wait) | Action::Wait(wait) => {
                    self.deliver_later(call, ms(wait), Event::Woke);
                    return;
                }
                Action::AwaitSlot(at_most) => {
                    self.calls[call].awaiting_slot = true;
                    self.slot_waiters.push_back(call);
                    self.deliver_later(call, ms(at_most), Event::Woke);
                    return;
                }
                Action::AskProgress => {
                    let age = if self.down() {
                        None
                    } else {
                        self.limiter.progress_age(SCOPE, self.now)
                    };
                    self.calls[call].last_progress = Some(age);
                    Event::Progress(age)
                }
                Action::Finish(ending) => {
                    self.finish(call, ending);
                    return;
                }
            };
            let now = self.at(self.now);
            step = self.machine(call).step(event, now);
        }
    }

    fn record(&mut self, call: usize, step: &Step) {
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
                        ms(t.saturating_duration_since(self.base))
                    )
                })
                .unwrap_or_default();
            let line = format!("{} ms: {:?}{cool}", self.now, step.action);
            self.calls[call].trace.push(line);
        }
    }

    fn trace_event(&mut self, call: usize, what: impl FnOnce() -> String) {
        if self.keep_trace {
            let line = format!("{} ms:   <- {}", self.now, what());
            self.calls[call].trace.push(line);
        }
    }

    /// The router's selection over the sources (as `ScopeRouter::select` does it).
    fn select(&mut self, call: usize, exclude: &[usize], avoid: Option<usize>) -> Selected {
        let now = self.now;
        let mut earliest: Option<Ms> = None;
        let mut paced = false;
        let mut candidates: Vec<Candidate> = self
            .sources
            .iter()
            .enumerate()
            .map(|(index, s)| {
                let excluded = exclude.contains(&index);
                let cooling = s.cooling_until > now;
                if !excluded && cooling {
                    earliest = Some(earliest.map_or(s.cooling_until, |e| e.min(s.cooling_until)));
                }
                let has_slot = s.in_flight < s.pacer_limit;
                if !excluded && !cooling && !has_slot {
                    paced = true;
                }
                Candidate {
                    index,
                    health: 1.0,
                    in_flight: s.in_flight,
                    eligible: !excluded && !cooling && has_slot,
                }
            })
            .collect();
        let other = candidates
            .iter()
            .any(|c| c.eligible && Some(c.index) != avoid);
        if let (true, Some(a)) = (other, avoid) {
            candidates[a].eligible = false;
        }
        let selected = match LeastInflight.select(&candidates, &mut self.selector_rng) {
            Some(index) => {
                self.sources[index].in_flight += 1;
                self.calls[call].ticket = Some(index);
                let s = &self.sources[index];
                if s.in_flight > s.pacer_limit {
                    let what = format!(
                        "{} in flight above its pacer limit {}",
                        s.name, s.pacer_limit
                    );
                    self.violation(call, what);
                }
                Selected::Picked(index)
            }
            None => Selected::NoneEligible {
                earliest_cooling: earliest.map(|t| self.at(t)),
                paced,
            },
        };
        self.trace_event(call, || format!("{selected:?}"));
        selected
    }

    /// The admission actor: breaker first, then the six gates; a probe the gates refuse is
    /// handed back.
    fn admit(&mut self, call: usize, source: usize) -> Admission {
        let answer = self.admit_inner(call, source);
        if !matches!(answer, Admission::Granted) {
            self.release_ticket(call);
        }
        self.trace_event(call, || format!("{answer:?}"));
        answer
    }

    fn admit_inner(&mut self, call: usize, source: usize) -> Admission {
        if self.down() {
            return Admission::BackendDown("simulated backend down".into());
        }
        let now = self.now;
        self.ids += 1;
        let id = self.ids;
        let s = &mut self.sources[source];
        let (epoch, probe) = match s
            .breaker
            .acquire(now, &s.breaker_config, || format!("p{id}").into())
        {
            BreakerAdmit::Pass { epoch } => (epoch, None),
            BreakerAdmit::Probe { epoch, probe_id } => (epoch, Some(probe_id)),
            BreakerAdmit::Refused { state, retry_after } => {
                if state == BreakerState::Open {
                    let known = &mut self.calls[call].known_ready[source];
                    *known = (*known).max(now + ms(retry_after));
                }
                self.check_epoch(call, source);
                return Admission::BreakerRefused { state, retry_after };
            }
        };
        if probe.is_some() {
            self.probes_out += 1;
        }
        self.check_epoch(call, source);
        let s = &self.sources[source];
        let request = GateRequest {
            scope: SCOPE.into(),
            source: Arc::clone(&s.name),
            global: self.config.global,
            per_source: s.limits,
            est_tokens: 100,
            lease_id: format!("l{id}").into(),
            lease_ttl: self.config.lease_ttl,
        };
        match self.limiter.admit(&request, now) {
            GateDecision::Admitted(lease) => {
                self.calls[call].permit = Some(SimPermit {
                    source,
                    lease,
                    epoch,
                    probe,
                });
                self.calls[call].granted += 1;
                self.check_caps(call, source);
                if let Some(dead) = self.sources[source].dead_seen {
                    let cooldown = ms(self.sources[source].breaker_config.cooldown);
                    if now < dead + cooldown {
                        let what = format!(
                            "dead key s{source} admitted {} ms after it answered dead (cooldown {cooldown} ms)",
                            now - dead
                        );
                        self.violation(call, what);
                    }
                }
                Admission::Granted
            }
            GateDecision::Refused { gate, retry_after } => {
                if let Some(p) = probe {
                    self.sources[source].breaker.release_probe(&p);
                    self.probes_out -= 1;
                }
                let ready = now + ms(retry_after);
                let known = &mut self.calls[call].known_ready;
                if gate.is_global() {
                    known.iter_mut().for_each(|k| *k = (*k).max(ready));
                } else {
                    known[source] = known[source].max(ready);
                }
                Admission::GateRefused { gate, retry_after }
            }
        }
    }

    /// The attempt's answer, drawn from the source's fault process: (duration, answer).
    fn plan_attempt(&mut self, call: usize, source: usize) -> (Ms, Kind) {
        let now = self.now;
        let streaming = self.calls[call].streaming;
        let timeout = self.attempt_timeout;
        let rng = &mut self.rng;
        let f = &self.sources[source].faults;
        let latency = rng.random_range(f.latency.0..=f.latency.1.max(f.latency.0));
        let fail = |class, reason, rate_limited, retry_after, delivered| {
            Kind::Fail(Failure {
                class,
                rate_limited,
                retry_after,
                reason,
                delivered,
                breaker: None,
            })
        };
        let hint = |rng: &mut SmallRng| {
            rng.random_bool(f.retry_after)
                .then(|| Duration::from_millis(rng.random_range(100..=10_000)))
        };
        if f.dead
            .is_some_and(|(from, until)| (from..until).contains(&now))
        {
            let reason = SourceReason::SourceDead;
            return (
                latency.min(50),
                fail(FailureClass::SourceDead, reason, false, None, 0),
            );
        }
        let roll: f64 = rng.random();
        let mut edge = 0.0;
        let mut next = |p: f64| {
            edge += p;
            roll < edge
        };
        if next(f.black_hole) {
            // The watchdog ends it.
            (
                timeout,
                fail(
                    FailureClass::Transient,
                    SourceReason::Timeout,
                    false,
                    None,
                    0,
                ),
            )
        } else if next(f.rate_limited) {
            let h = hint(rng);
            (
                latency.min(100),
                fail(
                    FailureClass::Transient,
                    SourceReason::RateLimited,
                    true,
                    h,
                    0,
                ),
            )
        } else if next(f.transient) {
            let h = hint(rng);
            (
                latency,
                fail(
                    FailureClass::Transient,
                    SourceReason::NetworkError,
                    false,
                    h,
                    0,
                ),
            )
        } else if next(f.truncate) {
            let delivered = if streaming {
                rng.random_range(1..=20)
            } else {
                0
            };
            (
                latency,
                fail(
                    FailureClass::Transient,
                    SourceReason::NetworkError,
                    false,
                    None,
                    delivered,
                ),
            )
        } else if next(f.rejected) {
            (
                latency,
                fail(
                    FailureClass::RequestRejected,
                    SourceReason::NetworkError,
                    false,
                    None,
                    0,
                ),
            )
        } else if next(f.invalid) {
            (
                latency,
                fail(
                    FailureClass::ResultInvalid,
                    SourceReason::NetworkError,
                    false,
                    None,
                    0,
                ),
            )
        } else if next(f.slow_first_token) {
            let slow = latency * 10;
            if slow > timeout {
                (
                    timeout,
                    fail(
                        FailureClass::Transient,
                        SourceReason::Timeout,
                        false,
                        None,
                        0,
                    ),
                )
            } else {
                (slow, Kind::Ok)
            }
        } else {
            (latency, Kind::Ok)
        }
    }

    /// `AdmissionMsg::Finish`: breaker verdict, TPM settle, lease release, progress; the breaker
    /// state it left. Lost while the backend is down (the TTLs reclaim the lease and the probe).
    fn settle(
        &mut self,
        call: usize,
        action: BreakerAction,
        tokens: u64,
        progress: bool,
    ) -> Option<BreakerStatus> {
        let permit = self.calls[call].permit.take()?;
        if permit.probe.is_some() {
            self.probes_out -= 1;
        }
        if self.down() {
            return None;
        }
        let now = self.now;
        if progress {
            self.limiter.mark_progress(SCOPE, now);
        }
        let s = &mut self.sources[permit.source];
        let probe = permit.probe.as_deref();
        match action {
            BreakerAction::Record(verdict) => {
                s.breaker
                    .record(now, &s.breaker_config, permit.epoch, probe, verdict);
            }
            BreakerAction::ForceOpen => {
                s.breaker.force_open(now, &s.breaker_config);
                if let Some(p) = probe {
                    s.breaker.release_probe(p);
                }
            }
            BreakerAction::NoVerdict => {
                if let Some(p) = probe {
                    s.breaker.release_probe(p);
                }
            }
        }
        let status = BreakerStatus::from(&s.breaker.snapshot(now));
        self.check_epoch(call, permit.source);
        self.limiter.settle(&permit.lease, tokens);
        self.limiter.release(&permit.lease);
        Some(status)
    }

    fn release_ticket(&mut self, call: usize) {
        let Some(source) = self.calls[call].ticket.take() else {
            return;
        };
        let s = &mut self.sources[source];
        match s.in_flight.checked_sub(1) {
            Some(n) => s.in_flight = n,
            None => {
                let what = format!("{} in-flight count went negative", s.name);
                self.violation(call, what);
            }
        }
        // `Notify::notify_one`: wake one call waiting for a slot.
        while let Some(waiter) = self.slot_waiters.pop_front() {
            if self.calls[waiter].awaiting_slot && !self.calls[waiter].done {
                self.calls[waiter].awaiting_slot = false;
                self.deliver_later(waiter, 0, Event::Woke);
                break;
            }
        }
    }

    /// The caller dropped its future: the guards release everything, an attempt in flight is
    /// recorded `cancelled`, and no retry continues.
    fn cancel(&mut self, call: usize) {
        self.trace_event(call, || "cancelled by the caller".into());
        if self.calls[call].attempt.take().is_some() {
            let tokens = self.calls[call]
                .permit
                .as_ref()
                .map_or(0, |p| p.lease.est_tokens);
            self.settle(call, BreakerAction::NoVerdict, tokens, false);
            self.calls[call].rows += 1;
        }
        self.release_ticket(call);
        let c = &mut self.calls[call];
        c.done = true;
        c.generation += 1;
        c.awaiting_slot = false;
        if c.permit.is_some() {
            self.violation(call, "a permit outlived its call".into());
        }
    }

    fn finish(&mut self, call: usize, ending: Ending) {
        let now = self.now;
        let c = &mut self.calls[call];
        c.done = true;
        if let Ending::Unavailable { .. } = ending {
            if c.sends == 0 {
                c.rows += 1; // the terminal row
            }
        }
        let attempts = c.machine.as_ref().map_or(0, CallMachine::attempts);
        let expected_rows =
            attempts + u32::from(c.sends == 0 && matches!(ending, Ending::Unavailable { .. }));
        if c.rows != expected_rows || c.sends != attempts {
            let what = format!(
                "{} telemetry rows and {} sends for {attempts} attempts",
                c.rows, c.sends
            );
            self.violation(call, what);
        }
        if self.calls[call].ticket.is_some() || self.calls[call].permit.is_some() {
            self.violation(
                call,
                "finished while holding a pacer slot or a permit".into(),
            );
        }
        if let Ending::Unavailable {
            reason,
            retry_after,
            ..
        } = ending
        {
            let floor = self.calls[call]
                .known_ready
                .iter()
                .map(|r| r.saturating_sub(now))
                .min()
                .unwrap_or(0);
            let checked = !matches!(
                reason,
                ScopeReason::NoSources | ScopeReason::GovernanceBackendDown
            );
            if checked && ms(retry_after) < floor {
                let what = format!(
                    "{} with retry_after {} ms, but no source can serve for {floor} ms",
                    reason.as_str(),
                    ms(retry_after)
                );
                self.violation(call, what);
            }
        }
    }

    fn check_call(&mut self, call: usize, action: &Action) {
        let max = self.config.max_attempts;
        let window = self.config.stall_window;
        let c = &self.calls[call];
        let Some(machine) = c.machine.as_ref() else {
            return;
        };
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

    fn check_caps(&mut self, call: usize, source: usize) {
        let now = self.now;
        let s = &self.sources[source];
        let (cap, global_cap) = (s.limits.max_concurrency, self.config.global.max_concurrency);
        let held = self.limiter.usage(SCOPE, Some(&s.name), now).leases;
        let all = self.limiter.usage(SCOPE, None, now).leases;
        if cap > 0 && held > u64::from(cap) {
            self.violation(
                call,
                format!("{held} leases on s{source} above its cap {cap}"),
            );
        }
        if global_cap > 0 && all > u64::from(global_cap) {
            self.violation(
                call,
                format!("{all} leases in the scope above its cap {global_cap}"),
            );
        }
    }

    fn check_epoch(&mut self, call: usize, source: usize) {
        let s = &mut self.sources[source];
        let epoch = s.breaker.epoch();
        if epoch < s.epoch {
            let what = format!(
                "breaker epoch of s{source} went back from {} to {epoch}",
                s.epoch
            );
            self.violation(call, what);
        } else {
            s.epoch = epoch;
        }
    }

    /// After the last event: every call ended, and nothing is held once the TTLs have passed.
    fn check_quiescent(&mut self) {
        if let Some(call) = (0..self.calls.len()).find(|&c| !self.calls[c].done) {
            self.violation(call, "never finished (hung)".into());
        }
        let last = self.calls.len().saturating_sub(1);
        for i in 0..self.sources.len() {
            if self.sources[i].in_flight != 0 {
                let what = format!("s{i} leaked {} pacer slots", self.sources[i].in_flight);
                self.violation(last, what);
            }
        }
        if self.probes_out != 0 {
            let what = format!("{} probes never handed back", self.probes_out);
            self.violation(last, what);
        }
        let later = self.now + ms(self.config.lease_ttl) + 1;
        let leases = self.limiter.leases_held(SCOPE, later);
        if leases != 0 {
            self.violation(last, format!("{leases} leases outlive their TTL"));
        }
        let probe_ttl = self
            .sources
            .iter()
            .map(|s| ms(s.breaker_config.probe_ttl))
            .max();
        let after_probes = self.now + probe_ttl.unwrap_or(0) + 1;
        for i in 0..self.sources.len() {
            if self.sources[i].breaker.snapshot(after_probes).probe_held {
                self.violation(last, format!("s{i} holds a probe past its TTL"));
            }
        }
    }
}
