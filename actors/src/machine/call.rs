//! The decisions of one governed call, without I/O: the call loop as a state machine.
//!
//! `runtime/driver.rs` is the driver: it performs each [`Action`] (ask the router, ask admission,
//! run the transport, sleep) and feeds what happened back as an [`Event`], with `now` from the
//! scope's `Clock`. Everything that decides — budget, switching, backoff and jitter, the circuit-open and
//! quota paths, the stall guard, the `retry_after` hint — lives here, so it runs in unit tests and
//! in the simulator (`testkit::sim`) without a runtime. Randomness comes from the injected RNG.
//!
//! ```text
//!            ┌──────────────── Woke (backoff / slot / wait) ◄──────────────┐
//!            ▼                                                            │
//!   start ─► Selecting ─Picked─► Admitting ─Granted─► Sending ─Ok─► Finish(Success)
//!            │  ▲                  │ refused (breaker, source gate)  │ failed
//!            │  └──────────────────┘ (excluded for the round)        ├─ 429 ──► AskProgress? ─► Waiting
//!            │ none eligible                                         ├─ transient ─► BackingOff
//!            ├─ paced ─────────► AwaitingSlot                        ├─ dead ─► Selecting (cooled)
//!            ├─ quota hint ────► AskProgress? ─► Waiting             └─ budget spent / rejected /
//!            └─ circuits open ─► Finish(CircuitOpen) or Waiting            invalid / stream broken ─► Finish
//! ```
//!
//! Cancellation is the driver dropping its future: the machine holds no resources (the driver's
//! guards do), so there is no "cancelled" event to handle.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::Rng;

use crate::outcome::{AttemptVerdict, FailureClass, SourceReason};
use crate::policy::backoff::Backoff;
use crate::policy::limiter::LEASE_POLL;
use crate::policy::stall::StallWindow;
use crate::ports::breaker::{BreakerState, BreakerVerdict};
use crate::ports::gate::Gate;

use super::policy::CallPolicy;
use super::reason::ScopeReason;
use super::wait::{CapacityWait, WaitReason};
use crate::ports::attempt::{BreakerAction, BreakerStatus};

/// What the driver does next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// Ask the router for a source: `exclude` refused this round, `avoid` just failed.
    Select {
        exclude: Vec<usize>,
        avoid: Option<usize>,
    },
    /// Ask admission (breaker, then the six gates) for the source just picked.
    Admit { source: usize },
    /// Run attempt number `attempt` (1-based, 429 pushbacks included) on the admitted source.
    Send { source: usize, attempt: u32 },
    /// Transient backoff: attempt time, not charged to the stall window. Then [`Event::Woke`].
    Backoff(Duration),
    /// Wait for a freed pacer slot, at most this long. Then [`Event::Woke`].
    AwaitSlot(Duration),
    /// Ask how long ago the scope last progressed. Then [`Event::Progress`].
    AskProgress,
    /// Non-productive wait, charged to the stall window. Then [`Event::Woke`].
    Wait(Duration),
    /// The call ends.
    Finish(Ending),
}

/// How the call ends; the driver attaches the response or the last error.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ending {
    /// The last attempt answered.
    Success,
    /// The scope cannot serve now.
    Unavailable {
        reason: ScopeReason,
        retry_after: Duration,
        detail: String,
    },
    /// The last error rejected the request (no retry).
    Rejected,
    /// The last error said the answer was unusable (no retry).
    Invalid,
    /// The last attempt failed after deltas reached the consumer.
    StreamBroken { delivered: u64 },
}

/// What happened since the last action.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// The router's answer to [`Action::Select`].
    Selected(Selected),
    /// Admission's answer to [`Action::Admit`].
    Admission(Admission),
    /// The transport's answer to [`Action::Send`].
    Attempted(Outcome),
    /// A backoff, slot wait or stall wait ended.
    Woke,
    /// The answer to [`Action::AskProgress`] (`None`: never progressed, or unknown).
    Progress(Option<Duration>),
}

/// The router's answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Selected {
    /// This source, with its pacer slot held by the driver.
    Picked(usize),
    /// The scope has no sources at all.
    NoSources,
    /// Nothing eligible: `earliest_cooling` among cooling sources, `paced` if a full pacer
    /// (below the source's concurrency limit) was the only obstacle somewhere, `capped` if a
    /// source's own concurrency limit was.
    NoneEligible {
        earliest_cooling: Option<Instant>,
        paced: bool,
        capped: bool,
    },
}

/// Admission's answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Admission {
    /// Permit granted (the driver holds it).
    Granted,
    /// The governance backend could not answer: fail closed.
    BackendDown(String),
    /// The breaker refused.
    BreakerRefused {
        state: BreakerState,
        retry_after: Duration,
    },
    /// A gate refused.
    GateRefused { gate: Gate, retry_after: Duration },
}

/// The transport's answer, reduced to what the decisions read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Outcome {
    Ok,
    Failed(Failure),
}

/// A failed attempt as the decisions see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Failure {
    pub(crate) class: FailureClass,
    pub(crate) rate_limited: bool,
    pub(crate) retry_after: Option<Duration>,
    pub(crate) reason: SourceReason,
    /// Stream deltas already delivered to the consumer (0 for non-streaming calls).
    pub(crate) delivered: u64,
    /// The source's breaker as this attempt's finish left it (`None`: not known).
    pub(crate) breaker: Option<BreakerStatus>,
}

/// One decision: the next action, and a cooldown to publish into the source's memo first (so
/// the very next selection, of this call or another, skips it).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Step {
    pub(crate) cool: Option<(usize, Instant)>,
    pub(crate) action: Action,
}

impl Step {
    fn plain(action: Action) -> Self {
        Step { cool: None, action }
    }
}

/// How a finished attempt settles with the governance: the breaker action and the tokens the
/// TPM gates are settled at. `answer` is the tokens an answer reported (`Ok`), or the failed
/// attempt's verdict and class.
pub(crate) fn settlement(
    answer: Result<Option<u64>, (AttemptVerdict, FailureClass)>,
    est_tokens: u64,
    breaker_exempt: bool,
) -> (BreakerAction, u64) {
    let (action, tokens) = match answer {
        Ok(used) => (
            BreakerAction::Record(BreakerVerdict::Success),
            used.unwrap_or(est_tokens),
        ),
        Err((verdict, class)) => {
            let action = match (verdict, class) {
                (AttemptVerdict::Failure, FailureClass::Transient) => {
                    BreakerAction::Record(BreakerVerdict::Failure)
                }
                (AttemptVerdict::Dead, _) => BreakerAction::ForceOpen,
                (AttemptVerdict::AliveButUnusable, _) => {
                    BreakerAction::Record(BreakerVerdict::Success)
                }
                _ => BreakerAction::NoVerdict,
            };
            // Transient failures may have consumed tokens upstream: settle at the estimate.
            // 429s, 4xx and dead sources were refused: refund fully.
            let spent = class == FailureClass::Transient && verdict != AttemptVerdict::RateLimited;
            (action, if spent { est_tokens } else { 0 })
        }
    };
    // A structured-output re-ask never feeds the breaker (docs/behaviour.md §9.2).
    match action {
        BreakerAction::Record(_) if breaker_exempt => (BreakerAction::NoVerdict, tokens),
        other => (other, tokens),
    }
}

/// What a source tells the machine at the start of a call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SourceFacts {
    /// Its breaker's base cooldown: a dead key is not tried again before it ends.
    pub(crate) cooldown: Duration,
    /// Its local cooldown memo, if it is cooling now.
    pub(crate) cooling_until: Option<Instant>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Selecting,
    Admitting(usize),
    Sending(usize),
    BackingOff,
    AwaitingSlot(Instant),
    AskingProgress(Duration, WaitReason),
    /// Waiting `wait` (charged to the stall window) since `began`, for `reason`.
    Waiting {
        wait: Duration,
        began: Instant,
        reason: WaitReason,
    },
    Done,
}

/// The decisions of one call. See the module docs.
#[derive(Debug)]
pub(crate) struct CallMachine {
    scope: std::sync::Arc<str>,
    max_attempts: u32,
    backoff: Backoff,
    quota_full_fails_fast: bool,
    circuit_open_waits: bool,
    poll_interval: Duration,
    stall: StallWindow,
    rng: SmallRng,
    state: State,
    budget_used: u32,
    attempt_no: u32,
    excluded: Vec<usize>,
    avoid: Option<usize>,
    quota_hint: Option<Duration>,
    round_cooling: Option<Instant>,
    cooldowns: Vec<Duration>,
    /// Earliest moment each source could serve, as far as this call has seen (`None`: now).
    ready_at: Vec<Option<Instant>>,
    per_source: BTreeMap<usize, SourceReason>,
    min_retry_after: Option<Duration>,
    /// Time waited for capacity so far, by reason.
    capacity_wait: CapacityWait,
    /// [`CapacityWait::total`] when the last attempt was granted.
    waited_before_last_grant: Duration,
    /// Capacity wait between the previous attempt (or the call's start) and the last one granted.
    last_attempt_wait: Duration,
    /// The caller's deadline (docs/behaviour.md §5.7): past it nothing is sent.
    deadline: Option<Instant>,
    /// Per source, how long an attempt takes at the least as far as recent successes show
    /// (zero: unknown). An attempt that cannot end before the deadline is not started.
    attempt_floors: Vec<Duration>,
}

impl CallMachine {
    pub(crate) fn new(
        config: &CallPolicy,
        sources: impl IntoIterator<Item = SourceFacts>,
        rng: SmallRng,
        now: Instant,
    ) -> Self {
        let (cooldowns, ready_at) = sources
            .into_iter()
            .map(|s| (s.cooldown, s.cooling_until))
            .unzip();
        Self {
            scope: std::sync::Arc::clone(&config.scope),
            max_attempts: config.max_attempts,
            backoff: Backoff::new(config.backoff_base, config.backoff_max),
            quota_full_fails_fast: config.quota_full_fails_fast,
            circuit_open_waits: config.circuit_open_waits,
            poll_interval: config.poll_interval,
            stall: StallWindow::new(config.stall_window, now),
            rng,
            state: State::Selecting,
            budget_used: 0,
            attempt_no: 0,
            excluded: Vec::new(),
            avoid: None,
            quota_hint: None,
            round_cooling: None,
            cooldowns,
            ready_at,
            per_source: BTreeMap::new(),
            min_retry_after: None,
            capacity_wait: CapacityWait::default(),
            waited_before_last_grant: Duration::ZERO,
            last_attempt_wait: Duration::ZERO,
            deadline: None,
            attempt_floors: Vec::new(),
        }
    }

    /// Give the call a deadline (on the scope's clock) and, per source, the shortest time an
    /// attempt is expected to take (zero: unknown). Set before [`CallMachine::start`].
    pub(crate) fn set_deadline(
        &mut self,
        deadline: Option<Instant>,
        attempt_floors: Vec<Duration>,
    ) {
        self.deadline = deadline;
        self.attempt_floors = attempt_floors;
    }

    /// The first action of the call.
    pub(crate) fn start(&mut self) -> Step {
        Step::plain(self.select())
    }

    /// Attempts made so far (429 pushbacks included).
    pub(crate) fn attempts(&self) -> u32 {
        self.attempt_no
    }

    /// Budget spent so far (429 pushbacks excluded).
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn budget_used(&self) -> u32 {
        self.budget_used
    }

    /// Non-productive waiting charged to the stall window so far.
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn waited(&self) -> Duration {
        self.stall.waited()
    }

    /// Time this call waited for capacity so far, by reason.
    pub(crate) fn capacity_wait(&self) -> CapacityWait {
        self.capacity_wait
    }

    /// Capacity wait of the attempt last granted: since the attempt before it, or since the
    /// call started.
    pub(crate) fn last_attempt_wait(&self) -> Duration {
        self.last_attempt_wait
    }

    /// Why the call waits now (`None`: it is not in a timed wait).
    pub(crate) fn wait_reason(&self) -> Option<WaitReason> {
        match self.state {
            State::Waiting { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// The call queued behind waiting calls before it could look for capacity: waiting for
    /// capacity like a pacer wait, charged to the stall window.
    pub(crate) fn queued(&mut self, waited: Duration) {
        if !waited.is_zero() {
            self.stall.record_wait(waited);
            self.capacity_wait.add(WaitReason::Pacer, waited);
        }
    }

    /// The attempt being sent was answered by `source` — a hedge that won its race
    /// (`runtime/hedge.rs`) — so its outcome is that source's.
    pub(crate) fn served_by(&mut self, source: usize) {
        if let State::Sending(sending) = &mut self.state {
            *sending = source;
        }
    }

    /// Why each source could not serve, by source index.
    pub(crate) fn per_source(&self) -> &BTreeMap<usize, SourceReason> {
        &self.per_source
    }

    /// Feed what happened; get the next step. An event that does not answer the last action
    /// is a driver bug and panics.
    pub(crate) fn step(&mut self, event: Event, now: Instant) -> Step {
        // Past the deadline nothing more is tried, and nothing is sent: an attempt's own result
        // is still read (a success is a success), but an admission granted once the deadline
        // has passed (a network backend answers a round trip later) is given back unsent by the
        // driver.
        let in_flight = matches!(event, Event::Attempted(_));
        if !in_flight && self.state != State::Done && self.deadline.is_some_and(|d| now >= d) {
            if let (State::Admitting(source), Event::Admission(answer)) = (self.state, &event) {
                // A refusal that came back after the deadline still tells when its sources can
                // serve again: the ending's `retry_after` says so.
                self.learn_refusal(source, answer, now);
            }
            let detail = match event {
                Event::Admission(Admission::Granted) => {
                    "the call's deadline passed before its admission was granted"
                }
                _ => "the call's deadline passed while it waited",
            };
            return Step::plain(self.deadline_exceeded(detail.into(), now));
        }
        let mut step = self.step_in_time(event, now);
        if let (Some(deadline), Action::Backoff(wait) | Action::Wait(wait)) =
            (self.deadline, &step.action)
        {
            // A wait that ends at or past the deadline rules every later attempt out: end now.
            if now + *wait >= deadline {
                let detail =
                    format!("the call's next try would start in {wait:?}, at or past its deadline");
                step.action = self.deadline_exceeded(detail, now);
            }
        }
        if let (Some(deadline), Action::AwaitSlot(at_most)) = (self.deadline, &mut step.action) {
            *at_most = (*at_most).min(deadline.saturating_duration_since(now));
        }
        step
    }

    fn deadline_exceeded(&mut self, detail: String, now: Instant) -> Action {
        self.unavailable(ScopeReason::DeadlineExceeded, Duration::ZERO, detail, now)
    }

    fn step_in_time(&mut self, event: Event, now: Instant) -> Step {
        match (self.state, event) {
            (State::Selecting, Event::Selected(selected)) => self.on_selected(selected, now),
            (State::Admitting(source), Event::Admission(answer)) => {
                self.on_admission(source, answer, now)
            }
            (State::Sending(source), Event::Attempted(outcome)) => {
                self.on_attempted(source, outcome, now)
            }
            (State::BackingOff, Event::Woke) => Step::plain(self.select()),
            (State::AwaitingSlot(began), Event::Woke) => {
                let waited = now.saturating_duration_since(began);
                self.stall.record_wait(waited);
                self.capacity_wait.add(WaitReason::Pacer, waited);
                self.new_round();
                Step::plain(self.select())
            }
            (State::AskingProgress(wait, reason), Event::Progress(age)) => {
                let action = self.wait_or_stall(wait, reason, age, now);
                Step::plain(action)
            }
            (
                State::Waiting {
                    wait,
                    began,
                    reason,
                },
                Event::Woke,
            ) => {
                self.stall.record_wait(wait);
                self.capacity_wait
                    .add(reason, now.saturating_duration_since(began));
                self.new_round();
                Step::plain(self.select())
            }
            (state, event) => panic!("call machine: {event:?} does not answer state {state:?}"),
        }
    }

    fn select(&mut self) -> Action {
        self.state = State::Selecting;
        Action::Select {
            exclude: self.excluded.clone(),
            avoid: self.avoid,
        }
    }

    fn finish(&mut self, ending: Ending) -> Action {
        self.state = State::Done;
        Action::Finish(ending)
    }

    /// Scope-level failure. The hint is never below the earliest moment a source could serve
    /// as far as this call knows — Retry-After, a dead source's cooldown, a breaker its failure
    /// opened (issue #18: a dead only source, or a failure that tripped the only breaker, with
    /// `MAX_ATTEMPTS=1` used to answer "retry after 0 s" while the breaker stayed open).
    fn unavailable(
        &mut self,
        reason: ScopeReason,
        hint: Duration,
        detail: String,
        now: Instant,
    ) -> Action {
        let retry_after = hint.max(self.earliest_ready(now));
        self.finish(Ending::Unavailable {
            reason,
            retry_after,
            detail,
        })
    }

    fn earliest_ready(&self, now: Instant) -> Duration {
        self.ready_at
            .iter()
            .map(|r| r.map_or(Duration::ZERO, |t| t.saturating_duration_since(now)))
            .min()
            .unwrap_or(Duration::ZERO)
    }

    fn not_before(&mut self, source: usize, until: Instant) {
        if let Some(slot) = self.ready_at.get_mut(source) {
            *slot = Some(slot.map_or(until, |t| t.max(until)));
        }
    }

    fn note(&mut self, source: usize, reason: SourceReason, retry_after: Option<Duration>) {
        // An open breaker is the consequence of a dead source, not a new reason.
        let keep_dead = reason == SourceReason::CircuitOpen
            && self.per_source.get(&source) == Some(&SourceReason::SourceDead);
        if !keep_dead {
            self.per_source.insert(source, reason);
        }
        if let Some(r) = retry_after {
            self.min_retry_after = Some(self.min_retry_after.map_or(r, |m| m.min(r)));
        }
    }

    fn new_round(&mut self) {
        self.excluded.clear();
        self.quota_hint = None;
        self.round_cooling = None;
    }

    fn draw_backoff(&mut self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let u: f64 = self.rng.random();
        self.backoff
            .delay(attempt.saturating_sub(1), u, retry_after)
    }

    fn on_selected(&mut self, selected: Selected, now: Instant) -> Step {
        let action = match selected {
            Selected::Picked(source) => {
                let floor = self.attempt_floors.get(source).copied().unwrap_or_default();
                match self.deadline {
                    Some(deadline) if now + floor >= deadline => {
                        let left = deadline.saturating_duration_since(now);
                        let detail = format!(
                            "the call's deadline leaves {left:?}, less than the {floor:?} the source's recent attempts took"
                        );
                        self.deadline_exceeded(detail, now)
                    }
                    _ => {
                        self.state = State::Admitting(source);
                        Action::Admit { source }
                    }
                }
            }
            Selected::NoSources => self.finish(Ending::Unavailable {
                reason: ScopeReason::NoSources,
                retry_after: Duration::ZERO,
                detail: format!("scope {} has no sources", self.scope),
            }),
            Selected::NoneEligible {
                earliest_cooling,
                paced,
                capped,
            } => {
                // A source at its own concurrency limit is a full quota like a refusing gate
                // when the scope fails fast (its gate would refuse the attempt); waiting, the
                // call waits for its freed slot like for a pacer's.
                let capped_hint = (capped && self.quota_full_fails_fast).then_some(LEASE_POLL);
                let quota = match (self.quota_hint, capped_hint) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                if let Some(hint) = quota {
                    if self.quota_full_fails_fast {
                        self.unavailable(
                            ScopeReason::QuotaExhausted,
                            hint,
                            "every eligible source's quota is full".into(),
                            now,
                        )
                    } else {
                        self.begin_wait(hint.min(self.poll_interval), WaitReason::Gate, now)
                    }
                } else if paced || capped {
                    // Backpressure from the pacers: wait for a slot to come back.
                    self.state = State::AwaitingSlot(now);
                    Action::AwaitSlot(self.poll_interval)
                } else {
                    // The memo may lag the refusals of this round (it is updated by cast).
                    let earliest = match (earliest_cooling, self.round_cooling) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    let wait =
                        earliest.map_or(Duration::ZERO, |t| t.saturating_duration_since(now));
                    if !self.circuit_open_waits {
                        self.unavailable(
                            ScopeReason::CircuitOpen,
                            wait,
                            "every source's circuit is open".into(),
                            now,
                        )
                    } else {
                        // Never shortened: sleep to the earliest cooldown end, plus jitter.
                        let jitter = Duration::from_millis(self.rng.random_range(0..=50));
                        self.begin_wait(wait + jitter, WaitReason::Cooldown, now)
                    }
                }
            }
        };
        Step::plain(action)
    }

    /// What a refusal tells of when its source — or, behind a scope-wide gate, every source —
    /// can serve again.
    fn learn_refusal(&mut self, source: usize, answer: &Admission, now: Instant) {
        match *answer {
            Admission::BreakerRefused {
                state: BreakerState::Open,
                retry_after,
            } => self.not_before(source, now + retry_after),
            Admission::GateRefused { gate, retry_after } if gate.is_global() => {
                for s in 0..self.ready_at.len() {
                    self.not_before(s, now + retry_after);
                }
            }
            Admission::GateRefused { retry_after, .. } => {
                self.not_before(source, now + retry_after);
            }
            _ => {}
        }
    }

    fn on_admission(&mut self, source: usize, answer: Admission, now: Instant) -> Step {
        self.learn_refusal(source, &answer, now);
        let mut cool = None;
        let action = match answer {
            Admission::Granted => {
                let waited = self.capacity_wait.total();
                self.last_attempt_wait = waited.saturating_sub(self.waited_before_last_grant);
                self.waited_before_last_grant = waited;
                self.attempt_no += 1;
                self.budget_used += 1;
                self.state = State::Sending(source);
                Action::Send {
                    source,
                    attempt: self.attempt_no,
                }
            }
            Admission::BackendDown(detail) => self.finish(Ending::Unavailable {
                reason: ScopeReason::GovernanceBackendDown,
                retry_after: Duration::from_secs(5),
                detail,
            }),
            Admission::BreakerRefused { state, retry_after } => {
                self.note(source, SourceReason::CircuitOpen, Some(retry_after));
                let until = if state == BreakerState::Open {
                    now + retry_after
                } else {
                    // A probe is in flight and nobody knows when it ends: skip the source
                    // for a poll interval. Not cooling it let calls waiting on full pacers
                    // wake each other forever at the same instant, each refused pick freeing a
                    // slot (simulator seed 12).
                    now + self.poll_interval
                };
                self.round_cooling = Some(self.round_cooling.map_or(until, |r| r.min(until)));
                cool = Some((source, until));
                self.excluded.push(source);
                self.select()
            }
            Admission::GateRefused { gate, retry_after } => {
                if gate.is_global() {
                    if self.quota_full_fails_fast {
                        self.unavailable(
                            ScopeReason::QuotaExhausted,
                            retry_after,
                            format!("scope quota full ({gate:?})"),
                            now,
                        )
                    } else {
                        self.begin_wait(retry_after.min(self.poll_interval), WaitReason::Gate, now)
                    }
                } else {
                    self.excluded.push(source);
                    self.quota_hint =
                        Some(self.quota_hint.map_or(retry_after, |q| q.min(retry_after)));
                    self.select()
                }
            }
        };
        Step { cool, action }
    }

    fn on_attempted(&mut self, source: usize, outcome: Outcome, now: Instant) -> Step {
        let failure = match outcome {
            Outcome::Ok => return Step::plain(self.finish(Ending::Success)),
            Outcome::Failed(failure) => failure,
        };
        if failure.delivered > 0 {
            let ending = Ending::StreamBroken {
                delivered: failure.delivered,
            };
            return Step::plain(self.finish(ending));
        }
        match failure.class {
            FailureClass::RequestRejected => return Step::plain(self.finish(Ending::Rejected)),
            FailureClass::ResultInvalid => return Step::plain(self.finish(Ending::Invalid)),
            FailureClass::Transient | FailureClass::SourceDead => {}
        }
        self.note(source, failure.reason, failure.retry_after);
        self.avoid = Some(source);
        if let Some(hint) = failure.retry_after {
            self.not_before(source, now + hint);
        }
        let dead = failure.class == FailureClass::SourceDead;
        // A dead source is not tried before its cooldown ends; a breaker this very failure
        // opened (or found open) says exactly when it ends. Either cools the memo at once.
        let mut cool: Option<(usize, Instant)> = None;
        if dead {
            cool = Some((
                source,
                now + self.cooldowns.get(source).copied().unwrap_or_default(),
            ));
        }
        if let Some(BreakerStatus::Open { retry_after }) = failure.breaker {
            let until = now + retry_after;
            cool = Some((source, cool.map_or(until, |(_, t)| t.max(until))));
        }
        if let Some((_, until)) = cool {
            self.not_before(source, until);
        }
        let action = if failure.rate_limited {
            // Pushback: no budget spent; the wait counts as stalling.
            self.budget_used -= 1;
            let wait = self.draw_backoff(self.attempt_no, failure.retry_after);
            self.begin_wait(wait, WaitReason::RateLimited, now)
        } else if self.budget_used >= self.max_attempts {
            let hint = self.min_retry_after.unwrap_or(Duration::ZERO);
            let detail = format!("{} attempt(s) failed", self.budget_used);
            self.unavailable(ScopeReason::RetryExhausted, hint, detail, now)
        } else if dead {
            self.select()
        } else {
            // Transient backoff is attempt time, not stall time.
            self.state = State::BackingOff;
            Action::Backoff(self.draw_backoff(self.budget_used, failure.retry_after))
        };
        Step { cool, action }
    }

    /// A non-productive wait. Condition (A) of the stall guard is local and cheap; the backend
    /// is asked for (B) only once it holds.
    fn begin_wait(&mut self, wait: Duration, reason: WaitReason, now: Instant) -> Action {
        if self.stall.waited() >= self.stall.window() {
            self.state = State::AskingProgress(wait, reason);
            Action::AskProgress
        } else {
            // Not stalled: (A) does not hold (the scope's age is irrelevant).
            self.wait(self.clamp_wait(wait), reason, now)
        }
    }

    fn wait(&mut self, wait: Duration, reason: WaitReason, now: Instant) -> Action {
        self.state = State::Waiting {
            wait,
            began: now,
            reason,
        };
        Action::Wait(wait)
    }

    fn wait_or_stall(
        &mut self,
        wait: Duration,
        reason: WaitReason,
        progress_age: Option<Duration>,
        now: Instant,
    ) -> Action {
        if self.stall.is_stalled(progress_age) {
            let hint = self.min_retry_after.unwrap_or(Duration::ZERO);
            let detail = format!(
                "waited {:?} without progress in the scope",
                self.stall.waited()
            );
            return self.unavailable(ScopeReason::Stalled, hint, detail, now);
        }
        self.wait(self.clamp_wait(wait), reason, now)
    }

    /// Once the stall budget is spent but the scope is progressing, keep waiting at the natural
    /// pace: clamping to a zero budget would spin.
    fn clamp_wait(&self, wait: Duration) -> Duration {
        let budget = self.stall.remaining_budget();
        if budget.is_zero() {
            wait
        } else {
            wait.min(budget)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::ScopeConfig;
    use rand::SeedableRng;

    const COOLDOWN: Duration = Duration::from_secs(30);

    fn config(max_attempts: u32) -> ScopeConfig {
        let mut c = ScopeConfig::new("LLM");
        c.max_attempts = max_attempts;
        c.backoff_base = Duration::from_millis(100);
        c.backoff_max = Duration::from_secs(1);
        c.stall_window = Duration::from_secs(10);
        c.poll_interval = Duration::from_millis(500);
        c
    }

    fn machine(config: &ScopeConfig, sources: usize, t0: Instant) -> CallMachine {
        let config = &config.call_policy();
        let facts = (0..sources).map(|_| SourceFacts {
            cooldown: COOLDOWN,
            cooling_until: None,
        });
        CallMachine::new(config, facts, SmallRng::seed_from_u64(7), t0)
    }

    fn failed(class: FailureClass, rate_limited: bool, retry_after: Option<Duration>) -> Event {
        let reason = match class {
            FailureClass::SourceDead => SourceReason::SourceDead,
            _ if rate_limited => SourceReason::RateLimited,
            _ => SourceReason::NetworkError,
        };
        Event::Attempted(Outcome::Failed(Failure {
            class,
            rate_limited,
            retry_after,
            reason,
            delivered: 0,
            breaker: None,
        }))
    }

    /// A transient failure whose finish reported the breaker open for `retry_after`.
    fn tripped(retry_after: Duration) -> Event {
        Event::Attempted(Outcome::Failed(Failure {
            class: FailureClass::Transient,
            rate_limited: false,
            retry_after: None,
            reason: SourceReason::NetworkError,
            delivered: 0,
            breaker: Some(BreakerStatus::Open { retry_after }),
        }))
    }

    /// Pick source 0, get it admitted: the machine asks to send.
    /// The reason and hint of a call that ended unavailable (any other action fails the test).
    fn unavailable(action: &Action) -> (ScopeReason, Duration) {
        match action {
            Action::Finish(Ending::Unavailable {
                reason,
                retry_after,
                ..
            }) => (*reason, *retry_after),
            other => panic!("expected the call to end unavailable, got {other:?}"),
        }
    }

    fn admitted(m: &mut CallMachine, now: Instant) -> Action {
        assert!(matches!(
            m.step(Event::Selected(Selected::Picked(0)), now).action,
            Action::Admit { source: 0 }
        ));
        m.step(Event::Admission(Admission::Granted), now).action
    }

    fn deadline_of(action: &Action) -> String {
        match action {
            Action::Finish(Ending::Unavailable {
                reason: ScopeReason::DeadlineExceeded,
                detail,
                ..
            }) => detail.clone(),
            other => panic!("expected deadline_exceeded, got {other:?}"),
        }
    }

    /// A started machine of three attempts whose deadline is `deadline` after `t0`, the source's
    /// attempts having taken at least `floor`.
    fn started_with_deadline(t0: Instant, deadline: Duration, floor: Duration) -> CallMachine {
        let mut m = machine(&config(3), 1, t0);
        m.set_deadline(Some(t0 + deadline), vec![floor]);
        m.start();
        m
    }

    #[test]
    fn a_deadline_passed_while_waiting_ends_the_call_before_anything_is_sent() {
        let t0 = Instant::now();
        let mut m = started_with_deadline(t0, Duration::from_millis(300), Duration::ZERO);
        let paced = Selected::NoneEligible {
            earliest_cooling: None,
            paced: true,
            capped: false,
        };
        // The slot wait is cut to what is left of the deadline …
        let step = m.step(Event::Selected(paced), t0);
        assert_eq!(step.action, Action::AwaitSlot(Duration::from_millis(300)));
        // … and waking at it ends the call: no select, no admission, no send.
        let step = m.step(Event::Woke, t0 + Duration::from_millis(300));
        assert!(deadline_of(&step.action).contains("while it waited"));
        assert_eq!(m.attempts(), 0);
    }

    #[test]
    fn an_admission_granted_past_the_deadline_is_not_sent() {
        let t0 = Instant::now();
        let mut m = started_with_deadline(t0, Duration::from_millis(300), Duration::ZERO);
        let step = m.step(Event::Selected(Selected::Picked(0)), t0);
        assert_eq!(step.action, Action::Admit { source: 0 });
        // Asked in time, answered after the deadline (a network backend's round trip).
        let step = m.step(
            Event::Admission(Admission::Granted),
            t0 + Duration::from_millis(310),
        );
        assert!(deadline_of(&step.action).contains("before its admission was granted"));
        assert_eq!(m.attempts(), 0, "nothing was sent");
    }

    #[test]
    fn a_refusal_that_comes_back_after_the_deadline_still_sets_retry_after() {
        let t0 = Instant::now();
        let mut m = started_with_deadline(t0, Duration::from_millis(300), Duration::ZERO);
        m.step(Event::Selected(Selected::Picked(0)), t0);
        let refused = Admission::GateRefused {
            gate: Gate::GlobalConcurrency,
            retry_after: Duration::from_millis(250),
        };
        let step = m.step(Event::Admission(refused), t0 + Duration::from_millis(310));
        let (reason, retry_after) = unavailable(&step.action);
        assert_eq!(reason, ScopeReason::DeadlineExceeded);
        assert_eq!(retry_after, Duration::from_millis(250), "the gate's hint");
    }

    #[test]
    fn a_wait_past_the_deadline_ends_the_call_at_once() {
        let t0 = Instant::now();
        let mut m = started_with_deadline(t0, Duration::from_secs(2), Duration::ZERO);
        admitted(&mut m, t0);
        // A 429 asking for 5 s: waiting would only miss the deadline.
        let step = m.step(
            failed(FailureClass::Transient, true, Some(Duration::from_secs(5))),
            t0,
        );
        assert!(deadline_of(&step.action).contains("at or past its deadline"));
        // A global gate hinting past the deadline too (the poll is shorter, but the wait
        // still ends after the deadline here).
        let mut m = started_with_deadline(t0, Duration::from_millis(100), Duration::ZERO);
        m.step(Event::Selected(Selected::Picked(0)), t0);
        let refused = Admission::GateRefused {
            gate: Gate::GlobalRpm,
            retry_after: Duration::from_secs(10),
        };
        let step = m.step(Event::Admission(refused), t0);
        deadline_of(&step.action);
    }

    #[test]
    fn an_attempt_that_cannot_end_in_time_is_not_started() {
        let t0 = Instant::now();
        let floor = Duration::from_millis(200);
        let mut m = started_with_deadline(t0, Duration::from_millis(150), floor);
        let step = m.step(Event::Selected(Selected::Picked(0)), t0);
        assert!(deadline_of(&step.action).contains("200ms"), "{step:?}");
        // With room for the attempt it goes ahead, and its result is read even past the
        // deadline: a late success is still the answer.
        let mut m = started_with_deadline(t0, Duration::from_millis(250), floor);
        assert!(matches!(admitted(&mut m, t0), Action::Send { .. }));
        let step = m.step(Event::Attempted(Outcome::Ok), t0 + Duration::from_secs(1));
        assert_eq!(step.action, Action::Finish(Ending::Success));
    }

    #[test]
    fn no_deadline_changes_nothing() {
        let t0 = Instant::now();
        let mut m = machine(&config(3), 1, t0);
        m.set_deadline(None, vec![Duration::from_secs(60)]);
        m.start();
        assert!(matches!(admitted(&mut m, t0), Action::Send { .. }));
    }

    #[test]
    fn a_dead_only_source_with_one_attempt_hints_its_cooldown() {
        let t0 = Instant::now();
        let mut m = machine(&config(1), 1, t0);
        m.start();
        assert_eq!(
            admitted(&mut m, t0),
            Action::Send {
                source: 0,
                attempt: 1
            }
        );
        let step = m.step(failed(FailureClass::SourceDead, false, None), t0);
        assert_eq!(
            step.cool,
            Some((0, t0 + COOLDOWN)),
            "the memo is cooled at once"
        );
        let (reason, retry_after) = unavailable(&step.action);
        assert_eq!(reason, ScopeReason::RetryExhausted);
        assert_eq!(retry_after, COOLDOWN, "not 0 s while the breaker is open");
        assert_eq!(m.per_source()[&0], SourceReason::SourceDead);
    }

    #[test]
    fn a_failure_that_trips_the_only_breaker_hints_the_breaker_cooldown() {
        let t0 = Instant::now();
        // A grown streak: longer than the base cooldown.
        let open = Duration::from_secs(60);
        // Budget 1: the call ends on this failure.
        let mut m = machine(&config(1), 1, t0);
        m.start();
        admitted(&mut m, t0);
        let step = m.step(tripped(open), t0);
        assert_eq!(
            step.cool,
            Some((0, t0 + open)),
            "the memo is cooled at once"
        );
        let (reason, retry_after) = unavailable(&step.action);
        assert_eq!(reason, ScopeReason::RetryExhausted);
        assert_eq!(retry_after, open, "not 0 s while the breaker is open");
        assert_eq!(m.per_source()[&0], SourceReason::NetworkError);
        // Budget 3: back off, then the cooled source leaves nothing eligible: circuit open.
        let mut m = machine(&config(3), 1, t0);
        m.start();
        admitted(&mut m, t0);
        let step = m.step(tripped(open), t0);
        assert_eq!(step.cool, Some((0, t0 + open)));
        let Action::Backoff(wait) = step.action else {
            panic!("{:?}", step.action);
        };
        let t1 = t0 + wait;
        m.step(Event::Woke, t1);
        let none = Selected::NoneEligible {
            earliest_cooling: Some(t0 + open),
            paced: false,
            capped: false,
        };
        let Action::Finish(Ending::Unavailable {
            reason,
            retry_after,
            ..
        }) = m.step(Event::Selected(none), t1).action
        else {
            panic!("expected the end of the call");
        };
        assert_eq!(reason, ScopeReason::CircuitOpen);
        assert_eq!(retry_after, open - wait);
    }

    #[test]
    fn a_dead_source_is_switched_at_once_and_the_other_is_still_a_way_out() {
        let t0 = Instant::now();
        let mut m = machine(&config(1), 2, t0);
        m.start();
        admitted(&mut m, t0);
        let step = m.step(failed(FailureClass::SourceDead, false, None), t0);
        // Budget spent, but source 1 could serve now: the hint stays 0.
        let Action::Finish(Ending::Unavailable { retry_after, .. }) = step.action else {
            panic!("{:?}", step.action);
        };
        assert_eq!(retry_after, Duration::ZERO);
        let mut m = machine(&config(3), 2, t0);
        m.start();
        admitted(&mut m, t0);
        let step = m.step(failed(FailureClass::SourceDead, false, None), t0);
        assert_eq!(
            step.action,
            Action::Select {
                exclude: vec![],
                avoid: Some(0)
            },
            "no backoff"
        );
    }

    #[test]
    fn a_429_spends_no_budget_and_waits_at_least_retry_after() {
        let t0 = Instant::now();
        let mut m = machine(&config(1), 1, t0);
        m.start();
        admitted(&mut m, t0);
        let hint = Duration::from_secs(2);
        let step = m.step(failed(FailureClass::Transient, true, Some(hint)), t0);
        assert_eq!(
            step.action,
            Action::Wait(hint),
            "stall-charged wait of the hint"
        );
        assert_eq!(m.budget_used(), 0);
        let t1 = t0 + hint;
        assert!(matches!(
            m.step(Event::Woke, t1).action,
            Action::Select { .. }
        ));
        assert_eq!(m.waited(), hint);
        // The next attempt is number 2 but still within a budget of 1.
        m.step(Event::Selected(Selected::Picked(0)), t1);
        let send = m.step(Event::Admission(Admission::Granted), t1).action;
        assert_eq!(
            send,
            Action::Send {
                source: 0,
                attempt: 2
            }
        );
    }

    #[test]
    fn transient_failures_back_off_with_seeded_jitter_then_exhaust() {
        let t0 = Instant::now();
        let run = || {
            let mut m = machine(&config(2), 1, t0);
            m.start();
            admitted(&mut m, t0);
            let backoff = m
                .step(failed(FailureClass::Transient, false, None), t0)
                .action;
            let Action::Backoff(d) = backoff else {
                panic!("{backoff:?}")
            };
            assert!(
                (Duration::from_millis(50)..=Duration::from_millis(150)).contains(&d),
                "{d:?}"
            );
            assert_eq!(
                m.waited(),
                Duration::ZERO,
                "backoff is attempt time, not stalling"
            );
            m.step(Event::Woke, t0 + d);
            admitted(&mut m, t0 + d);
            let end = m
                .step(failed(FailureClass::Transient, false, None), t0 + d)
                .action;
            assert!(matches!(
                end,
                Action::Finish(Ending::Unavailable {
                    reason: ScopeReason::RetryExhausted,
                    ..
                })
            ));
            d
        };
        assert_eq!(run(), run(), "the same seed draws the same jitter");
    }

    #[test]
    fn refusals_exclude_for_the_round_and_open_circuits_fail_fast() {
        let t0 = Instant::now();
        let mut m = machine(&config(3), 2, t0);
        m.start();
        m.step(Event::Selected(Selected::Picked(0)), t0);
        let refused = Admission::BreakerRefused {
            state: BreakerState::Open,
            retry_after: Duration::from_secs(9),
        };
        let step = m.step(Event::Admission(refused), t0);
        assert_eq!(step.cool, Some((0, t0 + Duration::from_secs(9))));
        assert_eq!(
            step.action,
            Action::Select {
                exclude: vec![0],
                avoid: None
            }
        );
        m.step(Event::Selected(Selected::Picked(1)), t0);
        let refused = Admission::BreakerRefused {
            state: BreakerState::Open,
            retry_after: Duration::from_secs(4),
        };
        m.step(Event::Admission(refused), t0);
        // The memo lags (cast): the machine remembers the round's refusals itself.
        let none = Selected::NoneEligible {
            earliest_cooling: None,
            paced: false,
            capped: false,
        };
        let end = m.step(Event::Selected(none), t0).action;
        assert_eq!(
            end,
            Action::Finish(Ending::Unavailable {
                reason: ScopeReason::CircuitOpen,
                retry_after: Duration::from_secs(4),
                detail: "every source's circuit is open".into(),
            })
        );
    }

    #[test]
    fn a_busy_probe_cools_the_source_for_a_poll_interval() {
        let t0 = Instant::now();
        let mut m = machine(&config(3), 1, t0);
        m.start();
        m.step(Event::Selected(Selected::Picked(0)), t0);
        let busy = Admission::BreakerRefused {
            state: BreakerState::HalfOpen,
            retry_after: Duration::ZERO,
        };
        let step = m.step(Event::Admission(busy), t0);
        assert_eq!(step.cool, Some((0, t0 + Duration::from_millis(500))));
    }

    #[test]
    fn waiting_past_the_window_asks_for_progress_and_stalls_only_without_it() {
        let t0 = Instant::now();
        let mut m = machine(&config(3), 1, t0);
        m.start();
        let mut now = t0;
        let quota = Admission::GateRefused {
            gate: Gate::GlobalRpm,
            retry_after: Duration::from_secs(60),
        };
        // Waits are clamped to the poll interval and then to the remaining stall budget.
        while m.waited() < Duration::from_secs(10) {
            m.step(Event::Selected(Selected::Picked(0)), now);
            let Action::Wait(d) = m.step(Event::Admission(quota.clone()), now).action else {
                panic!("expected a wait");
            };
            now += d;
            m.step(Event::Woke, now);
        }
        m.step(Event::Selected(Selected::Picked(0)), now);
        assert_eq!(
            m.step(Event::Admission(quota.clone()), now).action,
            Action::AskProgress
        );
        // Fresh progress elsewhere: keep waiting at the natural pace.
        let fresh = m
            .step(Event::Progress(Some(Duration::from_secs(1))), now)
            .action;
        assert_eq!(fresh, Action::Wait(Duration::from_millis(500)));
        now += Duration::from_millis(500);
        m.step(Event::Woke, now);
        m.step(Event::Selected(Selected::Picked(0)), now);
        m.step(Event::Admission(quota), now);
        let Action::Finish(Ending::Unavailable {
            reason,
            retry_after,
            ..
        }) = m.step(Event::Progress(None), now).action
        else {
            panic!("expected stalled");
        };
        assert_eq!(reason, ScopeReason::Stalled);
        // The scope gate said 60 s, so no source can serve before then.
        assert!(retry_after >= Duration::from_secs(49), "{retry_after:?}");
    }

    #[test]
    fn rejected_invalid_and_broken_streams_end_the_call() {
        let t0 = Instant::now();
        for (event, ending) in [
            (
                failed(FailureClass::RequestRejected, false, None),
                Ending::Rejected,
            ),
            (
                failed(FailureClass::ResultInvalid, false, None),
                Ending::Invalid,
            ),
        ] {
            let mut m = machine(&config(3), 1, t0);
            m.start();
            admitted(&mut m, t0);
            assert_eq!(m.step(event, t0).action, Action::Finish(ending));
        }
        let mut m = machine(&config(3), 1, t0);
        m.start();
        admitted(&mut m, t0);
        let broken = Event::Attempted(Outcome::Failed(Failure {
            class: FailureClass::Transient,
            rate_limited: false,
            retry_after: None,
            reason: SourceReason::NetworkError,
            delivered: 3,
            breaker: None,
        }));
        assert_eq!(
            m.step(broken, t0).action,
            Action::Finish(Ending::StreamBroken { delivered: 3 })
        );
    }

    #[test]
    fn settlement_maps_verdicts_to_breaker_actions_and_tokens() {
        use AttemptVerdict as V;
        assert_eq!(
            settlement(Ok(Some(42)), 100, false),
            (BreakerAction::Record(BreakerVerdict::Success), 42)
        );
        assert_eq!(
            settlement(Ok(None), 100, true),
            (BreakerAction::NoVerdict, 100),
            "re-ask exempt"
        );
        assert_eq!(
            settlement(Err((V::Failure, FailureClass::Transient)), 100, false),
            (BreakerAction::Record(BreakerVerdict::Failure), 100)
        );
        assert_eq!(
            settlement(Err((V::RateLimited, FailureClass::Transient)), 100, false),
            (BreakerAction::NoVerdict, 0)
        );
        assert_eq!(
            settlement(Err((V::Dead, FailureClass::SourceDead)), 100, true),
            (BreakerAction::ForceOpen, 0)
        );
    }

    #[test]
    fn capacity_wait_counts_pacer_and_pushback_waits_but_not_transient_backoff() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut m = machine(&config(3), 1, t0);
        m.start();
        // Every pacer is full: the call waits for a slot, which comes back 200 ms later.
        let paced = Selected::NoneEligible {
            earliest_cooling: None,
            paced: true,
            capped: false,
        };
        let step = m.step(Event::Selected(paced), t0);
        assert!(matches!(step.action, Action::AwaitSlot(_)));
        let t1 = t0 + ms(200);
        m.step(Event::Woke, t1);
        assert!(matches!(
            admitted(&mut m, t1),
            Action::Send { attempt: 1, .. }
        ));
        assert_eq!(m.last_attempt_wait(), ms(200));
        // A 429 with `Retry-After: 1`: the pushback wait is capacity too.
        let step = m.step(failed(FailureClass::Transient, true, Some(ms(1000))), t1);
        assert!(matches!(step.action, Action::Wait(_)));
        let t2 = t1 + ms(1000);
        m.step(Event::Woke, t2);
        assert!(matches!(
            admitted(&mut m, t2),
            Action::Send { attempt: 2, .. }
        ));
        assert_eq!(m.last_attempt_wait(), ms(1000));
        // A 5xx: the retry's back-off is not waiting for capacity.
        let step = m.step(failed(FailureClass::Transient, false, None), t2);
        assert!(matches!(step.action, Action::Backoff(_)));
        let t3 = t2 + ms(300);
        m.step(Event::Woke, t3);
        assert!(matches!(
            admitted(&mut m, t3),
            Action::Send { attempt: 3, .. }
        ));
        assert_eq!(m.last_attempt_wait(), Duration::ZERO);
        let waited = m.capacity_wait();
        assert_eq!(waited.of(WaitReason::Pacer), ms(200));
        assert_eq!(waited.of(WaitReason::RateLimited), ms(1000));
        assert_eq!(waited.total(), ms(1200));
    }

    #[test]
    fn waiting_for_open_circuits_and_full_gates_is_named_by_its_reason() {
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut c = config(3);
        c.circuit_open_waits = true;
        c.quota_full_fails_fast = false;
        let mut m = machine(&c, 1, t0);
        m.start();
        let cooling = Selected::NoneEligible {
            earliest_cooling: Some(t0 + ms(100)),
            paced: false,
            capped: false,
        };
        assert!(matches!(
            m.step(Event::Selected(cooling), t0).action,
            Action::Wait(_)
        ));
        let t1 = t0 + ms(150);
        m.step(Event::Woke, t1);
        m.step(Event::Selected(Selected::Picked(0)), t1);
        let refused = Admission::GateRefused {
            gate: Gate::GlobalRpm,
            retry_after: ms(400),
        };
        assert!(matches!(
            m.step(Event::Admission(refused), t1).action,
            Action::Wait(_)
        ));
        let t2 = t1 + ms(400);
        m.step(Event::Woke, t2);
        admitted(&mut m, t2);
        let waited = m.capacity_wait();
        assert_eq!(waited.of(WaitReason::Cooldown), ms(150));
        assert_eq!(waited.of(WaitReason::Gate), ms(400));
        assert_eq!(m.last_attempt_wait(), ms(550));
    }

    /// With `QUOTA_FULL=fail_fast`, a source at its own concurrency limit is a full quota: the
    /// call ends `quota_exhausted` at once (hint: the lease poll) instead of waiting for a slot;
    /// with `wait` it waits for the freed slot as before.
    #[test]
    fn a_source_at_its_own_concurrency_limit_fails_fast_or_waits_by_the_quota_policy() {
        let t0 = Instant::now();
        let capped = Selected::NoneEligible {
            earliest_cooling: None,
            paced: false,
            capped: true,
        };
        let mut c = config(3);
        c.quota_full_fails_fast = true;
        let mut m = machine(&c, 1, t0);
        m.start();
        match m.step(Event::Selected(capped.clone()), t0).action {
            Action::Finish(Ending::Unavailable {
                reason: ScopeReason::QuotaExhausted,
                retry_after,
                ..
            }) => assert_eq!(retry_after, LEASE_POLL),
            other => panic!("expected quota_exhausted, got {other:?}"),
        }
        assert_eq!(m.attempts(), 0);

        c.quota_full_fails_fast = false;
        let mut m = machine(&c, 1, t0);
        m.start();
        assert!(matches!(
            m.step(Event::Selected(capped), t0).action,
            Action::AwaitSlot(_)
        ));
    }

    /// A pacer full below the source's limit is the pacer's backpressure, not a quota: even a
    /// fail-fast scope waits for the slot. A full quota anywhere in the round (a source's gate
    /// refused, or a source at its own concurrency limit) ends a fail-fast call, as a refusing
    /// gate beside a full pacer always did, with the earliest of their hints.
    #[test]
    fn a_pacer_below_the_limit_is_waited_for_even_when_failing_fast() {
        let t0 = Instant::now();
        let mut c = config(3);
        c.quota_full_fails_fast = true;
        let mut m = machine(&c, 2, t0);
        m.start();
        let paced = Selected::NoneEligible {
            earliest_cooling: None,
            paced: true,
            capped: false,
        };
        assert!(matches!(
            m.step(Event::Selected(paced), t0).action,
            Action::AwaitSlot(_)
        ));
        // A source's own RPM gate refused (the other is capped): fail fast with the gate's hint.
        m.step(Event::Woke, t0);
        m.step(Event::Selected(Selected::Picked(0)), t0);
        let refused = Admission::GateRefused {
            gate: Gate::SourceRpm,
            retry_after: Duration::from_secs(20),
        };
        assert!(matches!(
            m.step(Event::Admission(refused), t0).action,
            Action::Select { .. }
        ));
        let capped = Selected::NoneEligible {
            earliest_cooling: None,
            paced: false,
            capped: true,
        };
        match m.step(Event::Selected(capped), t0).action {
            Action::Finish(Ending::Unavailable {
                reason: ScopeReason::QuotaExhausted,
                retry_after,
                ..
            }) => assert_eq!(retry_after, LEASE_POLL),
            other => panic!("expected quota_exhausted, got {other:?}"),
        }
    }
}
