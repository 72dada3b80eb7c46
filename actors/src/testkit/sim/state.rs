//! The world's mutable state ([`State`]): the clock, timers, fault schedule and, per call and per
//! source, the books the invariants are checked against; the hash and trace of every step.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

use crate::machine::call::{Action, Ending, Step};
use crate::policy::wait_queue::Priority;
use rand::rngs::SmallRng;

use super::faults::{Answer, Faults};
use super::params::{ms, Ms};
use super::wire::{Meant, Wire};
/// What one call's invariants are checked against, kept independently of the driver.
#[derive(Debug)]
pub(super) struct CallBook {
    pub(super) seed: u64,
    pub(super) streaming: bool,
    pub(super) done: bool,
    pub(super) granted: u32,
    pub(super) pushbacks: u32,
    pub(super) rows: u32,
    pub(super) terminal_rows: u32,
    pub(super) sends: u32,
    /// Attempts the machine counted, as of its last step.
    pub(super) attempts: u32,
    /// The source of the attempt being sent, while the machine's `Send` is performed: an
    /// admission or a row of another source meanwhile is a hedge's.
    pub(super) sending: Option<usize>,
    /// Hedges admitted (each is sent once and leaves one row, like an attempt).
    pub(super) hedges: u32,
    /// A hedge's side of the race runs: its source was picked, and neither its admission was
    /// refused nor its row is in.
    pub(super) hedge_open: bool,
    /// The machine's attempt was a 429 while its hedge ran: the race's answer only if the hedge
    /// fails before any delta too (else the hedge's answer is the attempt's, §5.9).
    pub(super) pushback_pending: bool,
    /// The source whose cut stream is being continued, from the driver's word until the
    /// machine's next step: an admission meanwhile is the continuation's.
    pub(super) continuing: Option<usize>,
    /// Continuations admitted (each is sent once and leaves one row, like an attempt).
    pub(super) continuations: u32,
    /// Per source, whether it sent this call a tool call's first piece.
    pub(super) tool_delta: Vec<bool>,
    /// Per source, the earliest moment it could serve as far as this call has been told.
    pub(super) known_ready: Vec<Ms>,
    pub(super) last_progress: Option<Option<Duration>>,
    pub(super) trace: Vec<String>,
    /// Its class, tenant and weight in the waiting room, and its deadline (virtual ms).
    pub(super) priority: Priority,
    pub(super) tenant: Option<Arc<str>>,
    pub(super) weight: u32,
    pub(super) deadline: Option<Ms>,
    /// Its arrival number in the room, once it has waited; whether it was ever admitted.
    pub(super) place: Option<u64>,
    pub(super) admitted: bool,
    /// Its last selection found nothing but sources at their own concurrency limit, in a
    /// scope that fails fast on a full quota.
    pub(super) capped_only: bool,
    /// Each attempt as the observer saw it: (source, result) (scripted runs compare it).
    #[cfg(test)]
    pub(super) log: AttemptLog,
    /// How the call ended (`ok` or the failure's kind), once it returned.
    #[cfg(test)]
    pub(super) ending: Option<&'static str>,
}

impl CallBook {
    /// A call not yet started, over `sources` sources.
    pub(super) fn new(seed: u64, streaming: bool, sources: usize) -> Self {
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
            hedge_open: false,
            pushback_pending: false,
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

    /// The hedge's side of the race ended, `failed_before_delta` or not: a 429 of the machine's
    /// attempt while it ran is the race's answer only when the hedge failed before any delta too
    /// (else the hedge's answer is the attempt's, docs/behaviour.md §5.9).
    pub(super) fn close_hedge(&mut self, failed_before_delta: bool) {
        self.hedge_open = false;
        if std::mem::take(&mut self.pushback_pending) && failed_before_delta {
            self.pushbacks += 1;
        }
    }
}

/// What the pacer invariants follow per source.
#[derive(Debug, Default)]
pub(super) struct PacerBook {
    pub(super) observations: u64,
    /// Limit before the 429 window began, and the lowest limit since it began: the lowest in
    /// the window, or, after a cut past the window, where that cut left it (recovery is growth
    /// from the last cut).
    pub(super) before_window: Option<u32>,
    pub(super) lowest_since_window: Option<u32>,
    /// Successes observed after the window ended (and after any later 429's `Retry-After`, which
    /// freezes growth) that could grow the limit (more than half of the whole limit in flight);
    /// whether the recovery was judged.
    pub(super) successes_after: u32,
    /// Until when the 429s seen so far froze the pacer's growth (their `Retry-After`).
    pub(super) frozen_until: Ms,
    pub(super) judged: bool,
    /// The limit after the previous observation.
    pub(super) last: Option<u32>,
    /// The pacer started open (`AdaptivePacer::open`) and has not cut yet: its first cut starts
    /// from what was in flight, not from its limit.
    pub(super) open: bool,
    /// The most attempts in flight any observation reported while the pacer was open.
    pub(super) open_peak: u32,
}

/// A timer's payload.
#[derive(Debug)]
pub(super) enum Timer {
    Wake(Waker),
    Start(usize),
    Cancel(usize),
}

/// A lease a call saw granted: which call, and for what beside its own attempt, if anything.
#[derive(Debug, Clone, Copy)]
pub(super) struct LeaseBook {
    pub(super) call: usize,
    pub(super) beside: Option<Beside>,
}

/// What an attempt beside the call's own is.
#[derive(Debug, Clone, Copy)]
pub(super) enum Beside {
    Hedge,
    Continuation,
}

/// The world's mutable state, behind one lock (never held across an await or a call into the
/// governance code).
#[derive(Debug)]
pub(super) struct State {
    pub(super) now: Ms,
    pub(super) rng: SmallRng,
    pub(super) faults: Vec<Faults>,
    /// A scripted schedule instead of the fault process: the answers of the attempts in order.
    pub(super) script: Option<VecDeque<Answer>>,
    pub(super) attempt_timeout: Ms,
    /// How the sources' transports read what their upstreams send, and how many answers it
    /// read.
    pub(super) wire: Arc<dyn Wire>,
    pub(super) answers_read: u64,
    pub(super) backend_down: Option<(Ms, Ms)>,
    /// The governance backend's round trip (`None`: in memory, answering at once).
    pub(super) backend_round_trip: Option<Ms>,
    /// Per source, when its key last answered dead, and that answer's place among the events
    /// ([`State::event`]).
    pub(super) dead_seen: Vec<Option<(Ms, u64)>>,
    /// Events counted so far: orders what happens within one virtual millisecond.
    pub(super) events: u64,
    pub(super) epochs: Vec<u64>,
    pub(super) timers: BinaryHeap<Reverse<(Ms, u64)>>,
    pub(super) timer_payloads: BTreeMap<u64, Timer>,
    pub(super) seq: u64,
    pub(super) ids: u64,
    /// Each lease a call saw granted, until its finish is applied.
    pub(super) leases: BTreeMap<Arc<str>, LeaseBook>,
    pub(super) probes_out: i64,
    pub(super) steps: u64,
    pub(super) hash: u64,
    pub(super) keep_trace: bool,
    pub(super) calls: Vec<CallBook>,
    pub(super) pacer: Vec<PacerBook>,
    pub(super) recoveries_checked: u32,
    pub(super) room_turns_checked: u32,
    pub(super) deadline_sends_checked: u32,
    pub(super) overloaded_answers: u32,
    /// Finishes the door held and an admission carried (network backends).
    pub(super) carried_finishes: u64,
    /// Tasks the door spawned: work that had to wait for the backend, held finishes' sends and
    /// the completion of admissions whose caller went away.
    pub(super) door_tasks: u64,
    /// Grants that came back after their call's deadline, given back unsent.
    pub(super) given_back: u64,
    /// Attempts sent through a hedge race (each earns its share of a hedge).
    pub(super) races: u64,
    pub(super) violations: Vec<(usize, String)>,
}

impl State {
    pub(super) fn new(
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
            wire: Arc::new(Meant),
            answers_read: 0,
            backend_down,
            backend_round_trip: None,
            dead_seen: vec![None; n],
            events: 0,
            epochs: vec![0; n],
            timers: BinaryHeap::new(),
            timer_payloads: BTreeMap::new(),
            seq: 0,
            ids: 0,
            probes_out: 0,
            leases: BTreeMap::new(),
            steps: 0,
            hash: 0xcbf2_9ce4_8422_2325,
            keep_trace,
            calls,
            pacer: (0..n).map(|_| PacerBook::default()).collect(),
            recoveries_checked: 0,
            room_turns_checked: 0,
            deadline_sends_checked: 0,
            overloaded_answers: 0,
            carried_finishes: 0,
            door_tasks: 0,
            given_back: 0,
            races: 0,
            violations: Vec::new(),
        }
    }
}

pub(super) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn fnv(hash: u64, value: u64) -> u64 {
    value.to_le_bytes().iter().fold(hash, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl State {
    /// Set a timer; its number, which orders timers due at the same instant.
    pub(super) fn timer(&mut self, at: Ms, timer: Timer) -> u64 {
        self.seq += 1;
        self.timers.push(Reverse((at, self.seq)));
        self.timer_payloads.insert(self.seq, timer);
        self.seq
    }

    /// The next event's place in the order of events.
    pub(super) fn event(&mut self) -> u64 {
        self.events += 1;
        self.events
    }

    pub(super) fn violation(&mut self, call: usize, what: String) {
        let line = format!("call #{call} at {} ms: {what}", self.now);
        self.calls[call].trace.push(format!("VIOLATION {what}"));
        self.violations.push((call, line));
    }

    pub(super) fn down(&self) -> bool {
        self.backend_down
            .is_some_and(|(from, until)| (from..until).contains(&self.now))
    }

    pub(super) fn trace_event(&mut self, call: usize, what: impl FnOnce() -> String) {
        if self.keep_trace {
            let line = format!("{} ms:   <- {}", self.now, what());
            self.calls[call].trace.push(line);
        }
    }

    pub(super) fn record(&mut self, call: usize, step: &Step, base: Instant) {
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
}

/// Attempts of a scripted call, as its observer saw them: (source, result).
#[cfg(test)]
pub(super) type AttemptLog = Vec<(String, String)>;
