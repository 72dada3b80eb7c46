//! The simulator's [`CallEffects`] ([`SimCall`]): what the production driver asks of a call —
//! selection, admission, send, settlement, waits — answered over the world in virtual time.

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::machine::call::{Action, CallMachine, Step};
use crate::policy::pacer::PacerObservation;
use crate::policy::wait_queue::Priority;
use crate::ports::attempt::{AttemptAdmit, AttemptOutcome, BreakerStatus};
use crate::ports::breaker::{BreakerBackend, BreakerState};
use crate::runtime::admission::{AdmitAnswer, AdmitRequest, BreakerAnswer, Permit};
use crate::runtime::driver::CallEffects;
use crate::runtime::metrics::ScopeMetrics;
use crate::runtime::router::{Picker, Selection};
use crate::runtime::waiting_room::WaitingRoom;
use crate::runtime::{ScopeConfig, SourceShared};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::params::{ms, SCOPE};
use super::sleep::Sleep;
use super::state::{Beside, LeaseBook};
use super::transport::SimTransport;
use super::world::World;
/// The simulator's effects for one call.
pub(super) struct SimCall {
    pub(super) world: Rc<World>,
    pub(super) call: usize,
}

impl SimCall {
    pub(super) fn sleep(&self, wait: Duration) -> Sleep {
        Sleep::new(Arc::clone(&self.world.state), ms(wait))
    }

    /// Caps of the lease just granted on `source` (per source and scope-wide) to a call of
    /// class `priority`: a batch call is admitted only while the leases held leave the batch
    /// reserve free, so with its own lease they are within the reserve-lowered cap.
    pub(super) fn check_caps(&self, source: usize, priority: Priority) -> Vec<String> {
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

    pub(super) fn epoch_of(&self, source: usize) -> u64 {
        let s = &self.world.sources[source];
        World::at_once(self.world.breakers.snapshot(SCOPE, &s.name, &s.breaker))
            .map_or(0, |b| b.epoch)
    }
}

impl CallEffects<SimTransport> for SimCall {
    type BreakerAnswer = BreakerAnswer;

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
    ) -> Result<Selection<SimTransport>, crate::runtime::RuntimeError> {
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
        if hedge
            && state.calls[self.call].continuing.is_none()
            && matches!(selection, Selection::Picked(_))
        {
            // The hedge's side of the race runs from here: its admission is part of it.
            state.calls[self.call].hedge_open = true;
        }
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
        let asked = self.world.lock().event();
        let answer = Arc::clone(&self.world.door).admit(request).await;
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
                let beside = match continuing {
                    Some(_) => Beside::Continuation,
                    None => Beside::Hedge,
                };
                let lease = LeaseBook {
                    call,
                    beside: Some(beside),
                };
                state.leases.insert(Arc::clone(&permit.lease.id), lease);
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
            if continuing.is_none() && !matches!(answer, Ok(AttemptAdmit::Admitted(_))) {
                // A hedge refused admission failed before any delta.
                state.calls[call].close_hedge(true);
            }
            state.trace_event(call, || format!("hedge {answer:?}"));
            return answer;
        }
        match &answer {
            Ok(AttemptAdmit::Admitted(permit)) => {
                let lease = LeaseBook { call, beside: None };
                state.leases.insert(Arc::clone(&permit.lease.id), lease);
                if permit.probe_id.is_some() {
                    state.probes_out += 1;
                }
                for p in caps {
                    state.violation(call, p);
                }
                // Asked before the key answered dead, an admission in flight to a network
                // backend is applied before that answer's finish: only one asked after it must
                // meet the breaker the finish opened.
                let dead_seen = state.dead_seen[source].filter(|&(_, seen)| seen < asked);
                if let Some((dead, _)) = dead_seen {
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

    fn settle(
        &self,
        permit: Permit,
        outcome: AttemptOutcome,
        answer: bool,
    ) -> Option<BreakerAnswer> {
        if permit.attempt.probe_id.is_some() {
            self.world.lock().probes_out -= 1;
        }
        // The production door: in place, held for the next admission, or retried in a task of
        // the executor's; the backend checks the breaker's epoch once the finish is applied.
        self.world.door.settle(permit, outcome, answer)
    }

    async fn breaker_after(&self, answer: BreakerAnswer) -> Option<BreakerStatus> {
        answer.await.ok().flatten()
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
            self.world.door.progress_age(SCOPE).await.ok().flatten()
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
        if let Action::Send { .. } = step.action {
            // A grant counts once sent: one that came back after the call's deadline is given
            // back unsent, and spends no budget.
            state.calls[self.call].granted += 1;
        }
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

    /// A hedge or continuation granted after the deadline is no attempt: nothing is sent for it
    /// and it leaves no row (a machine's attempt counts once sent).
    fn on_give_back(&self, permit: &Permit) {
        let mut state = self.world.lock();
        let call = self.call;
        state.given_back += 1;
        // Its finish still comes (the give-back); by then it is no hedge or continuation.
        let beside = state
            .leases
            .get_mut(&permit.attempt.lease.id)
            .and_then(|lease| lease.beside.take());
        match beside {
            Some(Beside::Hedge) => {
                // Never sent: it failed before any delta.
                state.calls[call].hedges -= 1;
                state.calls[call].close_hedge(true);
            }
            Some(Beside::Continuation) => state.calls[call].continuations -= 1,
            None => {}
        }
        state.trace_event(call, || {
            "granted past the deadline: given back unsent".into()
        });
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
