//! The call driver, written once for both worlds: it performs the [`CallMachine`]'s actions
//! through a [`CallEffects`] implementation and feeds back what happened.
//!
//! Production implements the effects with tokio and the scope's actors (`effects.rs`: the router
//! actor selects, the admission actor's door admits and settles, the source actor hears each
//! attempt); the simulator (`testkit::sim`) implements them in virtual time over the same
//! selection function, the `ComposedAttempts` admission with the memory backends and the real
//! pacer and health policies. Everything between the effects — the attempt guard, settlement,
//! the pacer observation, the observer's rows, the failure handed back to the machine, the
//! caller's result — is this file, so a seeded simulation runs the lines a production call runs.
//!
//! Waits for capacity go through the scope's [`WaitingRoom`] (a call's [`Standing`] in it), in
//! the order of docs/behaviour.md §5.7; the room sleeps with [`CallEffects::wait`], so the
//! simulator runs the same room in virtual time.
//!
//! Cancellation is dropping the driver's future: the pacer slot (`SourceTicket`), the admission
//! permit and the attempt are RAII values here, released on drop with no verdict.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use tracing::Instrument;

use crate::machine::call::{
    settlement, Action, Admission, CallMachine, Ending, Event, Failure, Outcome, Selected,
    SourceFacts, Step,
};
use crate::machine::wait::{CapacityWait, WaitReason};
use crate::outcome::{AttemptVerdict, Classify, FailureClass};
use crate::policy::pacer::PacerObservation;
use crate::policy::wait_queue::Priority;
use crate::ports::attempt::{AttemptAdmit, AttemptOutcome, BreakerAction, BreakerStatus};
use crate::ports::breaker::BreakerState;
use crate::ports::gate::GateRequest;
use crate::ports::transport::{EventSink, Transport};

use super::admission::{AdmitAnswer, AdmitRequest, Permit};
use super::continuation::{self, ContinueOutcome, Continuing};
use super::error::RuntimeError;
use super::governed::{CallFailure, GovernOptions, Governed};
use super::hedge::{self, HedgeOutcome, Hedging};
use super::metrics::ScopeMetrics;
use super::observer::{AttemptReport, AttemptResult, CallObserver, TerminalReport};
use super::router::Selection;
use super::scope::ScopeConfig;
use super::shared::{SourceShared, SourceTicket};
use super::waiting_room::{DeadlinePassed, Standing, WaitingRoom};

/// What a call does to the world. Every method takes `&self`: the attempt guard holds the
/// effects while the transport runs, and a world with state keeps it behind its own cell.
pub(crate) trait CallEffects<T: Transport> {
    /// The pending answer of a settlement whose breaker state the call waits for.
    type BreakerAnswer;

    /// The scope's configuration.
    fn config(&self) -> &ScopeConfig;
    /// The scope's sources, by index.
    fn sources(&self) -> &[Arc<SourceShared<T>>];
    /// The scope's metrics.
    fn metrics(&self) -> &ScopeMetrics;
    /// Now, from the scope's `Clock`.
    fn now(&self) -> Instant;
    /// The call's random source (backoff jitter).
    fn rng(&self) -> SmallRng;
    /// A fresh id (attempts, leases, terminal records).
    fn new_id(&self) -> String;

    /// Pick a source and take its pacer slot (`Err`: the scope's router is gone).
    fn select(
        &self,
        exclude: Vec<usize>,
        avoid: Option<usize>,
    ) -> impl Future<Output = Result<Selection<T>, RuntimeError>>;
    /// The source's breaker, then the six gates.
    fn admit(&self, request: AdmitRequest) -> impl Future<Output = AdmitAnswer>;
    /// Settle the permit (breaker verdict, tokens, release, progress). With `answer`, return
    /// the pending answer of the breaker state it leaves. Never awaits: a cancelled attempt
    /// settles from `Drop`.
    fn settle(
        &self,
        permit: Permit,
        outcome: AttemptOutcome,
        answer: bool,
    ) -> Option<Self::BreakerAnswer>;
    /// The breaker state a settlement left (`None`: not known).
    fn breaker_after(
        &self,
        answer: Self::BreakerAnswer,
    ) -> impl Future<Output = Option<BreakerStatus>>;
    /// Tell the source's adaptive policies (pacer, health) how an attempt ended.
    fn report(&self, source: &SourceShared<T>, observation: PacerObservation);

    /// Back off before retrying a transient failure (not a wait for capacity).
    fn backoff(&self, wait: Duration) -> impl Future<Output = ()>;
    /// A non-productive wait for capacity (a full quota, every circuit open, a 429).
    fn wait(&self, wait: Duration) -> impl Future<Output = ()>;
    /// The scope's waiting room (docs/behaviour.md §5.7): the driver waits there in order for
    /// a pacer slot, and out a gate's or cooldown's retry time (sleeping with
    /// [`CallEffects::wait`]).
    fn room(&self) -> &WaitingRoom;
    /// How long ago the scope last made progress (`None`: never, or unknown).
    fn progress(&self) -> impl Future<Output = Option<Duration>>;

    /// Every step the machine takes, before it is performed (the simulator traces and checks
    /// invariants here; production does nothing).
    fn on_step(&self, _step: &Step, _machine: &CallMachine) {}

    /// The scope's hedging of first tokens, when it is on (docs/behaviour.md §5.9).
    fn hedging(&self) -> Option<&Hedging> {
        None
    }

    /// The scope's continuation of cut streams, when it is on (docs/behaviour.md §5.10).
    fn continuing(&self) -> Option<&Continuing> {
        None
    }

    /// A stream cut on source `_cut` is about to be continued elsewhere (the simulator checks
    /// it against what the stream delivered; production does nothing).
    fn on_continuation(&self, _cut: usize) {}

    /// A permit granted once the call's deadline had passed is about to be given back unsent
    /// (the simulator stops counting it as an attempt; production does nothing).
    fn on_give_back(&self, _permit: &Permit) {}
}

/// What the call's loop leaves for its caller whatever the result: whether an attempt reached a
/// transport, and how long the call waited for capacity.
#[derive(Debug, Default)]
struct CallTrace {
    attempted: bool,
    capacity_wait: CapacityWait,
}

/// Run one governed call through `effects`. See the module docs.
pub(crate) async fn run<T: Transport, E: CallEffects<T>>(
    effects: &E,
    request: &T::Request,
    observer: &dyn CallObserver<T>,
    events: Option<&EventSink<T::Event>>,
    options: GovernOptions,
) -> Result<Governed<T::Response>, CallFailure<T::Error>> {
    let mut trace = CallTrace::default();
    let result = run_loop(effects, request, observer, events, options, &mut trace).await;
    effects.metrics().capacity_waited(&trace.capacity_wait);
    if let Err(failure) = &result {
        // Terminal records only for calls that never reached a transport: every attempt
        // already has its own record.
        if matches!(failure, CallFailure::Unavailable { .. }) && !trace.attempted {
            let record_id = effects.new_id();
            observer.on_terminal(&TerminalReport {
                scope: &effects.config().name,
                record_id: &record_id,
                failure,
                capacity_wait: trace.capacity_wait.total(),
            });
        }
    }
    result
}

/// The loop: performs the machine's actions and feeds back what happened. Every decision is in
/// `machine/call.rs`.
async fn run_loop<T: Transport, E: CallEffects<T>>(
    effects: &E,
    request: &T::Request,
    observer: &dyn CallObserver<T>,
    events: Option<&EventSink<T::Event>>,
    options: GovernOptions,
    trace: &mut CallTrace,
) -> Result<Governed<T::Response>, CallFailure<T::Error>> {
    let now = effects.now();
    let sources = effects.sources();
    let facts = sources.iter().map(|s| SourceFacts {
        cooldown: s.breaker.cooldown,
        cooling_until: s.cooling_until(now),
    });
    let policy = effects.config().call_policy();
    let mut machine = CallMachine::new(&policy, facts, effects.rng(), now);
    let deadline = options.deadline.map(|d| now + d);
    if deadline.is_some() {
        let floors = sources.iter().map(|s| s.attempt_floor()).collect();
        machine.set_deadline(deadline, floors);
    }
    // The call's place among waiting calls (docs/behaviour.md §5.7).
    let mut standing = Standing::new(
        effects.room(),
        options.priority,
        options.tenant.clone(),
        options.weight,
        deadline,
        effects.config().poll_interval,
        |wait| effects.wait(wait),
    );
    // The pacer slot of the source just picked, then the permit admission granted for it.
    let mut picked: Option<SourceTicket<T>> = None;
    let mut permit: Option<Permit> = None;
    let mut answered: Option<(T::Response, String, Arc<str>)> = None;
    // The source whose cut stream the answer continues (docs/behaviour.md §5.10).
    let mut continued_from: Option<Arc<str>> = None;
    let mut last_error: Option<T::Error> = None;
    let mut step = machine.start();
    loop {
        effects.on_step(&step, &machine);
        if let Some((index, until)) = step.cool {
            sources[index].cool_until(until);
        }
        if let Action::Select { .. } = &step.action {
            // Behind calls already waiting, in their order; free when nobody waits.
            let queued_at = effects.now();
            match standing.before_select().await {
                Ok(false) => {}
                Ok(true) => machine.queued(effects.now().saturating_duration_since(queued_at)),
                Err(DeadlinePassed) => {
                    machine.queued(effects.now().saturating_duration_since(queued_at));
                    // The deadline passed in the queue: the machine ends the call.
                    let nothing = Selected::NoneEligible {
                        earliest_cooling: None,
                        paced: true,
                        capped: false,
                    };
                    step = machine.step(Event::Selected(nothing), effects.now());
                    trace.capacity_wait = machine.capacity_wait();
                    continue;
                }
            }
        }
        let event = match step.action {
            Action::Select { exclude, avoid } => Event::Selected(
                match effects
                    .select(exclude, avoid)
                    .await
                    .map_err(|e| CallFailure::Shutdown(e.to_string()))?
                {
                    Selection::Picked(ticket) => {
                        let index = ticket.source().index;
                        picked = Some(ticket);
                        Selected::Picked(index)
                    }
                    Selection::NoneEligible {
                        no_sources: true, ..
                    } => Selected::NoSources,
                    Selection::NoneEligible {
                        earliest_cooling,
                        paced,
                        capped,
                        ..
                    } => Selected::NoneEligible {
                        earliest_cooling,
                        paced,
                        capped,
                    },
                },
            ),
            Action::Admit { .. } => {
                // A refused pick drops its ticket here: the pacer slot goes back at once.
                let ticket = picked.take().expect("admit follows a pick");
                let asked = effects.now();
                let answer = effects
                    .admit(admit_request(effects, ticket.source(), options.priority))
                    .await;
                effects
                    .metrics()
                    .admission_waited(effects.now().saturating_duration_since(asked).as_secs_f64());
                let source = ticket.source();
                Event::Admission(match answer {
                    Ok(AttemptAdmit::Admitted(attempt)) => {
                        source.metrics.breaker.seen(if attempt.probe_id.is_some() {
                            BreakerState::HalfOpen
                        } else {
                            BreakerState::Closed
                        });
                        permit = Some(Permit {
                            attempt,
                            breaker: source.breaker.clone(),
                            gauge: Arc::clone(&source.metrics.breaker),
                        });
                        picked = Some(ticket);
                        Admission::Granted
                    }
                    Ok(AttemptAdmit::BreakerRefused { state, retry_after }) => {
                        source.metrics.breaker.seen(state);
                        source
                            .counters
                            .breaker_refusals
                            .fetch_add(1, Ordering::Relaxed);
                        Admission::BreakerRefused { state, retry_after }
                    }
                    Ok(AttemptAdmit::GateRefused { gate, retry_after }) => {
                        Admission::GateRefused { gate, retry_after }
                    }
                    Err(e) => Admission::BackendDown(e.message),
                })
            }
            Action::Send { attempt, .. } => {
                standing.admitted();
                if attempt > 1 {
                    effects.metrics().retry();
                }
                trace.attempted = true;
                let mut guard = AttemptGuard {
                    effects,
                    observer,
                    ticket: picked.take().expect("send follows a pick"),
                    permit: permit.take(),
                    attempt_id: effects.new_id(),
                    attempt,
                    started: effects.now(),
                    capacity_wait: machine.last_attempt_wait(),
                    breaker_after: None,
                    lost: None,
                    continued_from: None,
                };
                let span = tracing::info_span!(
                    "pgw.attempt",
                    source = %guard.ticket.source().name,
                    attempt,
                    probe = guard.permit.as_ref().is_some_and(|p| p.attempt.probe_id.is_some()),
                    verdict = tracing::field::Empty,
                    class = tracing::field::Empty,
                    elapsed_ms = tracing::field::Empty,
                );
                let result = match effects.hedging() {
                    None => {
                        attempt_once(&mut guard, request, events, options.breaker_exempt)
                            .instrument(span)
                            .await
                    }
                    // The one seam of hedging: the race answers the attempt that won.
                    // Boxed: the race's state is large, and kept inline it would grow every
                    // call's future (moved on each spawn and await) whether it hedges or not.
                    Some(hedging) => {
                        let (winner, result) =
                            Box::pin(hedged(hedging, guard, request, events, &options, deadline))
                                .instrument(span)
                                .await;
                        machine.served_by(winner.ticket.source().index);
                        guard = winner;
                        result
                    }
                };
                let cut = Arc::clone(guard.ticket.source());
                let source = Arc::clone(&cut.name);
                let attempt_id = std::mem::take(&mut guard.attempt_id);
                let breaker_after = guard.breaker_after.take();
                let capacity_wait = guard.capacity_wait;
                drop(guard);
                // A stream cut after content may be carried on by another source.
                let (result, continued) = match (effects.continuing(), events) {
                    // A consumer that went away is sent nothing more.
                    (Some(continuing), Some(sink))
                        if result.is_err() && sink.delivered() > 0 && !sink.is_closed() =>
                    {
                        let cut = Cut {
                            continuing,
                            source: &cut,
                            attempt,
                            capacity_wait,
                            result,
                        };
                        // Boxed, like the hedge race, and handed the attempt's result to keep
                        // while it runs: a rare branch kept out of every call's future.
                        let continuing =
                            continue_cut(effects, observer, request, cut, sink, &options, deadline);
                        Box::pin(continuing).await
                    }
                    _ => (result, None),
                };
                // A `let`, so the `(result, continued)` pair (two answers' worth) is gone
                // before the breaker's await below instead of kept in every call's future.
                let failed = match (result, continued) {
                    (_, Some(continued)) => {
                        machine.served_by(continued.index);
                        continued_from = Some(Arc::clone(&cut.name));
                        answered =
                            Some((continued.response, continued.attempt_id, continued.source));
                        None
                    }
                    (Ok(response), None) => {
                        answered = Some((response, attempt_id, source));
                        None
                    }
                    (Err(error), None) => Some(error),
                };
                Event::Attempted(match failed {
                    None => Outcome::Ok,
                    Some(error) => {
                        // The finish was sent before the pacer and observer heard of the
                        // attempt; its answer is usually here already.
                        let breaker = match breaker_after {
                            Some(answer) => effects.breaker_after(answer).await,
                            None => None,
                        };
                        let failure = Failure {
                            class: error.class(),
                            rate_limited: error.is_rate_limited(),
                            retry_after: error.retry_after(),
                            reason: error.source_reason(),
                            delivered: events.map_or(0, EventSink::delivered),
                            breaker,
                        };
                        last_error = Some(error);
                        Outcome::Failed(failure)
                    }
                })
            }
            Action::Backoff(wait) => {
                effects.backoff(wait).await;
                Event::Woke
            }
            Action::Wait(wait) => {
                let room_wait = matches!(
                    machine.wait_reason(),
                    Some(WaitReason::Gate | WaitReason::Cooldown)
                );
                if room_wait {
                    // The room waits until then and only its head tries: waiters released
                    // together would overshoot the gate.
                    let _ = standing.await_capacity(Some(effects.now() + wait)).await;
                } else {
                    effects.wait(wait).await;
                }
                Event::Woke
            }
            Action::AwaitSlot(_) => {
                // Bounded by the room's poll and the call's deadline.
                let _ = standing.await_capacity(None).await;
                Event::Woke
            }
            Action::AskProgress => Event::Progress(effects.progress().await),
            Action::Finish(ending) => {
                if let Some(permit) = permit.take() {
                    // Granted once the call's deadline had passed: given back unsent.
                    give_back(effects, permit);
                }
                return finish(
                    effects,
                    ending,
                    &machine,
                    answered,
                    continued_from,
                    last_error,
                );
            }
        };
        step = machine.step(event, effects.now());
        trace.capacity_wait = machine.capacity_wait();
    }
}

/// The admission request for one attempt on `source`: a batch call is admitted against the
/// limits less the scope's batch reserve (`policy/reserve.rs`).
fn admit_request<T: Transport, E: CallEffects<T>>(
    effects: &E,
    source: &SourceShared<T>,
    priority: Priority,
) -> AdmitRequest {
    let config = effects.config();
    let reserve = config.batch_reserve;
    AdmitRequest {
        gate: GateRequest {
            scope: Arc::clone(&config.name),
            source: Arc::clone(&source.name),
            global: reserve.limits(config.global, priority),
            per_source: reserve.limits(source.limits, priority),
            est_tokens: source.est_tokens,
            lease_id: effects.new_id().into(),
            lease_ttl: config.lease_ttl,
        },
        breaker: source.breaker.clone(),
        gauge: Arc::clone(&source.metrics.breaker),
    }
}

/// The answer of one side of a hedge race: the attempt's guard and result.
type SideAnswer<'a, T, E> = (
    AttemptGuard<'a, T, E>,
    Result<<T as Transport>::Response, <T as Transport>::Error>,
);

/// An admitted attempt that owns its guard and its proxy sink: one side of a hedge race.
async fn run_side<'a, T: Transport, E: CallEffects<T>>(
    mut guard: AttemptGuard<'a, T, E>,
    request: &'a T::Request,
    sink: EventSink<T::Event>,
    exempt: bool,
) -> SideAnswer<'a, T, E> {
    let result = attempt_once(&mut guard, request, Some(&sink), exempt).await;
    (guard, result)
}

/// The source and permit of an attempt beside the call's own (a hedge, a continuation): the
/// router's pick among the sources not in `exclude` (its pacer slot), then the same admission
/// as any attempt (breaker, six gates, the call's priority). `NoSource` when no such source is
/// eligible or admission refuses; `Deadline` when admission granted it once the call's deadline
/// had passed (the permit is given back unsent: nothing is sent after the deadline).
async fn open_other<T: Transport, E: CallEffects<T>>(
    effects: &E,
    exclude: Vec<usize>,
    priority: Priority,
    deadline: Option<Instant>,
) -> Result<(SourceTicket<T>, Permit), Unopened> {
    let Ok(Selection::Picked(ticket)) = effects.select(exclude, None).await else {
        return Err(Unopened::NoSource);
    };
    let source = Arc::clone(ticket.source());
    match effects
        .admit(admit_request(effects, &source, priority))
        .await
    {
        Ok(AttemptAdmit::Admitted(attempt)) => {
            source.metrics.breaker.seen(if attempt.probe_id.is_some() {
                BreakerState::HalfOpen
            } else {
                BreakerState::Closed
            });
            let permit = Permit {
                attempt,
                breaker: source.breaker.clone(),
                gauge: Arc::clone(&source.metrics.breaker),
            };
            if deadline.is_some_and(|d| effects.now() >= d) {
                give_back(effects, permit);
                return Err(Unopened::Deadline);
            }
            Ok((ticket, permit))
        }
        Ok(AttemptAdmit::BreakerRefused { state, .. }) => {
            source.metrics.breaker.seen(state);
            source
                .counters
                .breaker_refusals
                .fetch_add(1, Ordering::Relaxed);
            Err(Unopened::NoSource)
        }
        Ok(AttemptAdmit::GateRefused { .. }) | Err(_) => Err(Unopened::NoSource),
    }
}

/// Why [`open_other`] opened no attempt.
enum Unopened {
    NoSource,
    Deadline,
}

/// Send the admitted attempt of `guard` with a hedge (docs/behaviour.md §5.9): each side
/// streams into a proxy of its own, `hedge::race` decides, and the attempt that answered comes
/// back with its result. The hedge is selected (never the same source) and admitted like any
/// attempt, with the call's priority; it is due after the source's p95 time to first token.
async fn hedged<'a, T: Transport, E: CallEffects<T>>(
    hedging: &'a Hedging,
    guard: AttemptGuard<'a, T, E>,
    request: &'a T::Request,
    events: Option<&EventSink<T::Event>>,
    options: &GovernOptions,
    deadline: Option<Instant>,
) -> SideAnswer<'a, T, E> {
    let effects = guard.effects;
    let (observer, number, capacity_wait) = (guard.observer, guard.attempt, guard.capacity_wait);
    let first = Arc::clone(guard.ticket.source());
    let exempt = options.breaker_exempt;
    let capacity = events.map_or(hedge::PROXY_CAPACITY, |s| s.sender().max_capacity());
    hedging.budget.earn();
    let delay = hedge::hedge_delay(&hedging.config, first.first_token.p95());
    let side = |mut guard: AttemptGuard<'a, T, E>| {
        let lost = Arc::new(AtomicBool::new(false));
        guard.lost = Some(Arc::clone(&lost));
        let (sink, events) = EventSink::channel(capacity);
        hedge::Side {
            attempt: Box::pin(run_side(guard, request, sink, exempt)),
            events,
            lost,
        }
    };
    let primary = side(guard);
    let open = || async {
        let (ticket, permit) = open_other(effects, vec![first.index], options.priority, deadline)
            .await
            .map_err(|unopened| match unopened {
                Unopened::NoSource => HedgeOutcome::NoSource,
                Unopened::Deadline => HedgeOutcome::Deadline,
            })?;
        ticket
            .source()
            .counters
            .hedges
            .fetch_add(1, Ordering::Relaxed);
        Ok(side(AttemptGuard {
            effects,
            observer,
            ticket,
            permit: Some(permit),
            attempt_id: effects.new_id(),
            attempt: number,
            started: effects.now(),
            capacity_wait,
            breaker_after: None,
            lost: None,
            continued_from: None,
        }))
    };
    let may_hedge = || {
        hedge::decide(
            &hedging.budget,
            effects.room().busy(),
            deadline,
            effects.now(),
        )
    };
    let raced = hedge::race(
        hedging,
        primary,
        effects.backoff(delay),
        may_hedge,
        open,
        |(_, result): &SideAnswer<'a, T, E>| result.is_ok(),
        || effects.now(),
        events,
    )
    .await;
    let (guard, result) = raced.answer;
    let source = guard.ticket.source();
    if let Some(took) = raced.first_token {
        source.first_token.record(took);
    }
    if raced.side == 1 {
        source.counters.hedges_won.fetch_add(1, Ordering::Relaxed);
    }
    (guard, result)
}

/// A stream cut after content, as the driver holds it once its attempt ended: the scope's
/// continuation, the attempt's source, its number, capacity wait and result (its error).
struct Cut<'a, T: Transport> {
    continuing: &'a Continuing,
    source: &'a Arc<SourceShared<T>>,
    attempt: u32,
    capacity_wait: Duration,
    result: Result<T::Response, T::Error>,
}

/// A continuation that answered: the answer spliced to the cut one, the continuation attempt's
/// id, and its source.
struct Continued<R> {
    response: R,
    attempt_id: String,
    source: Arc<str>,
    index: usize,
}

/// Continue a stream cut after content; the attempt's result comes back beside the
/// continuation's answer, if one came. The result is kept inside this boxed future while the
/// continuation runs, not in every call's.
async fn continue_cut<T: Transport, E: CallEffects<T>>(
    effects: &E,
    observer: &dyn CallObserver<T>,
    request: &T::Request,
    cut: Cut<'_, T>,
    events: &EventSink<T::Event>,
    options: &GovernOptions,
    deadline: Option<Instant>,
) -> (
    Result<T::Response, T::Error>,
    Option<Continued<T::Response>>,
) {
    let continued =
        continue_after(effects, observer, request, &cut, events, options, deadline).await;
    (cut.result, continued)
}

/// Continue a stream cut after content on another source (docs/behaviour.md §5.10): when the
/// transport reads the error as a cut and `continuation::decide` lets it go on, the router picks
/// among the other sources that take a prefill, admission admits it like any attempt, and the
/// continuation request streams into the caller's sink. `None` (counted by why) leaves the cut
/// to end the call as it does without continuation. Its guard is an attempt's: dropped with
/// the call, it releases its pacer slot, lease and permit, with a `cancelled` row.
async fn continue_after<T: Transport, E: CallEffects<T>>(
    effects: &E,
    observer: &dyn CallObserver<T>,
    request: &T::Request,
    cut: &Cut<'_, T>,
    events: &EventSink<T::Event>,
    options: &GovernOptions,
    deadline: Option<Instant>,
) -> Option<Continued<T::Response>> {
    let Err(error) = &cut.result else {
        return None;
    };
    let stream_cut = T::stream_cut(request, error)?;
    if let Err(outcome) = continuation::decide(&stream_cut, deadline, effects.now()) {
        cut.continuing.count(outcome);
        return None;
    }
    effects.on_continuation(cut.source.index);
    let exclude = effects
        .sources()
        .iter()
        .filter(|s| s.index == cut.source.index || !s.transport.prefill())
        .map(|s| s.index)
        .collect();
    let opened = open_other(effects, exclude, options.priority, deadline).await;
    let (ticket, permit) = match opened {
        Ok(opened) => opened,
        Err(Unopened::NoSource) => {
            cut.continuing.count(ContinueOutcome::NoSource);
            return None;
        }
        Err(Unopened::Deadline) => {
            cut.continuing.count(ContinueOutcome::Deadline);
            return None;
        }
    };
    let source = Arc::clone(ticket.source());
    source
        .counters
        .continuations
        .fetch_add(1, Ordering::Relaxed);
    let mut guard = AttemptGuard {
        effects,
        observer,
        ticket,
        permit: Some(permit),
        attempt_id: effects.new_id(),
        attempt: cut.attempt,
        started: effects.now(),
        capacity_wait: cut.capacity_wait,
        breaker_after: None,
        lost: None,
        continued_from: Some(Arc::clone(&cut.source.name)),
    };
    let span = tracing::info_span!(
        "pgw.continuation",
        source = %source.name,
        continued_from = %cut.source.name,
        verdict = tracing::field::Empty,
        class = tracing::field::Empty,
        elapsed_ms = tracing::field::Empty,
    );
    let exempt = options.breaker_exempt;
    let result = attempt_once(&mut guard, &stream_cut.request, Some(events), exempt)
        .instrument(span)
        .await;
    match result {
        Ok(response) => {
            cut.continuing.count(ContinueOutcome::Continued);
            Some(Continued {
                response: T::splice(error, response, &cut.source.name),
                attempt_id: std::mem::take(&mut guard.attempt_id),
                source: Arc::clone(&source.name),
                index: source.index,
            })
        }
        Err(_) => {
            cut.continuing.count(ContinueOutcome::Failed);
            None
        }
    }
}

/// Give back a permit that is not sent: its lease settled at its estimate, no breaker verdict
/// (and no attempt row: nothing was attempted).
fn give_back<T: Transport, E: CallEffects<T>>(effects: &E, permit: Permit) {
    let outcome = AttemptOutcome {
        action: BreakerAction::NoVerdict,
        tokens: permit.attempt.lease.est_tokens,
        progress: false,
    };
    effects.on_give_back(&permit);
    // Nobody waits for the breaker state a verdict-less finish leaves.
    let _ = effects.settle(permit, outcome, false);
}

/// Attach the response or the last error to the machine's ending.
fn finish<T: Transport, E: CallEffects<T>>(
    effects: &E,
    ending: Ending,
    machine: &CallMachine,
    answered: Option<(T::Response, String, Arc<str>)>,
    continued_from: Option<Arc<str>>,
    last_error: Option<T::Error>,
) -> Result<Governed<T::Response>, CallFailure<T::Error>> {
    let error = |e: Option<T::Error>| e.expect("a failed ending follows a failed attempt");
    match ending {
        Ending::Success => {
            let (response, attempt_id, source) =
                answered.expect("success follows an answered attempt");
            Ok(Governed {
                response,
                attempt_id,
                source,
                attempts: machine.attempts(),
                capacity_wait: machine.capacity_wait().total(),
                continued_from,
            })
        }
        Ending::Rejected => Err(CallFailure::Rejected(error(last_error))),
        Ending::Invalid => Err(CallFailure::Invalid(error(last_error))),
        Ending::StreamBroken { delivered } => Err(CallFailure::StreamBroken {
            error: error(last_error),
            delivered,
        }),
        Ending::Unavailable {
            reason,
            retry_after,
            detail,
        } => Err(CallFailure::Unavailable {
            reason,
            retry_after,
            per_source: machine
                .per_source()
                .iter()
                .map(|(&index, &reason)| (Arc::clone(&effects.sources()[index].name), reason))
                .collect(),
            last_error,
            detail,
        }),
    }
}

/// What the source's pacer learns from one attempt: latency, `Retry-After` and rate-limit
/// headers, read here so the source's policies get plain values (cheap to send per attempt).
fn pacer_observation<T: Transport>(
    result: &Result<T::Response, T::Error>,
    verdict: AttemptVerdict,
    sent: Instant,
    now: Instant,
    in_flight: u32,
) -> PacerObservation {
    let (retry_after, rate_limit) = match result {
        Ok(response) => (None, T::rate_limit_hint(response)),
        Err(error) => (error.retry_after(), error.rate_limit_hint()),
    };
    PacerObservation {
        verdict,
        now,
        latency: now.saturating_duration_since(sent),
        in_flight,
        retry_after,
        rate_limit,
    }
}

/// An admitted attempt in flight. Dropped without being settled it is a cancelled attempt: the
/// permit is settled at its estimate with no breaker verdict, the observer records `cancelled`,
/// and the pacer slot is freed.
struct AttemptGuard<'a, T: Transport, E: CallEffects<T>> {
    effects: &'a E,
    observer: &'a dyn CallObserver<T>,
    ticket: SourceTicket<T>,
    permit: Option<Permit>,
    attempt_id: String,
    attempt: u32,
    started: Instant,
    /// Capacity wait since the previous attempt (or the call's start).
    capacity_wait: Duration,
    /// The breaker state the settlement of a failed attempt left, once admission answers.
    breaker_after: Option<E::BreakerAnswer>,
    /// Set when the attempt lost a hedge race (`hedge.rs`): cancelled, it is recorded
    /// `hedge_cancelled` rather than `cancelled`.
    lost: Option<Arc<AtomicBool>>,
    /// The source whose cut stream this attempt continues (docs/behaviour.md §5.10).
    continued_from: Option<Arc<str>>,
}

impl<T: Transport, E: CallEffects<T>> AttemptGuard<'_, T, E> {
    /// Settle the permit; with `answer`, keep the pending answer of the breaker state it leaves.
    fn settle(&mut self, action: BreakerAction, tokens: u64, progress: bool, answer: bool) {
        if let Some(permit) = self.permit.take() {
            let outcome = AttemptOutcome {
                action,
                tokens,
                progress,
            };
            self.breaker_after = self.effects.settle(permit, outcome, answer);
        }
    }
}

impl<T: Transport, E: CallEffects<T>> Drop for AttemptGuard<'_, T, E> {
    fn drop(&mut self) {
        let Some(permit) = self.permit.as_ref() else {
            return;
        };
        let probe = permit.attempt.probe_id.is_some();
        let tokens = permit.attempt.lease.est_tokens;
        self.settle(BreakerAction::NoVerdict, tokens, false, false);
        let source = self.ticket.source();
        source.counters.cancelled.fetch_add(1, Ordering::Relaxed);
        source.metrics.attempt(None);
        let hedge_lost = self
            .lost
            .as_ref()
            .is_some_and(|lost| lost.load(Ordering::Acquire));
        self.observer.on_attempt(&AttemptReport {
            scope: &self.effects.config().name,
            source: &source.name,
            attempt_id: &self.attempt_id,
            attempt: self.attempt,
            elapsed: self.effects.now().saturating_duration_since(self.started),
            capacity_wait: self.capacity_wait,
            result: if hedge_lost {
                AttemptResult::HedgeCancelled
            } else {
                AttemptResult::Cancelled
            },
            probe,
            continued_from: self.continued_from.as_deref(),
        });
    }
}

/// One attempt through the transport, reported to admission, the source's policies and the
/// observer.
async fn attempt_once<T: Transport, E: CallEffects<T>>(
    guard: &mut AttemptGuard<'_, T, E>,
    request: &T::Request,
    events: Option<&EventSink<T::Event>>,
    breaker_exempt: bool,
) -> Result<T::Response, T::Error> {
    let effects = guard.effects;
    let source = Arc::clone(guard.ticket.source());
    source.counters.attempts.fetch_add(1, Ordering::Relaxed);
    let probe = guard
        .permit
        .as_ref()
        .is_some_and(|p| p.attempt.probe_id.is_some());
    let est = guard
        .permit
        .as_ref()
        .map_or(0, |p| p.attempt.lease.est_tokens);
    let sent = effects.now();
    let result = source.transport.send(request, events).await;
    let ended = effects.now();
    let elapsed = ended.saturating_duration_since(guard.started);
    let verdict = match &result {
        Ok(_) => AttemptVerdict::Success,
        Err(error) => AttemptVerdict::of_error(error),
    };
    let answer = match &result {
        Ok(response) => Ok(T::tokens_used(response)),
        Err(error) => Err((verdict, error.class())),
    };
    let (action, tokens) = settlement(answer, est, breaker_exempt);
    // A failure that may be retried or end the call unavailable needs the breaker state it
    // leaves, for the `retry_after` hint.
    let retryable = result.as_ref().err().is_some_and(|e| {
        matches!(
            e.class(),
            FailureClass::Transient | FailureClass::SourceDead
        )
    });
    guard.settle(
        action,
        tokens,
        verdict == AttemptVerdict::Success,
        retryable,
    );
    effects.report(
        &source,
        pacer_observation::<T>(&result, verdict, sent, ended, source.in_flight()),
    );
    source.metrics.attempt(Some(verdict));
    source
        .metrics
        .attempt_took(ended.saturating_duration_since(sent).as_secs_f64());
    let report_result = match &result {
        Ok(response) => AttemptResult::Ok(response),
        Err(error) => AttemptResult::Err(error),
    };
    guard.observer.on_attempt(&AttemptReport {
        scope: &effects.config().name,
        source: &source.name,
        attempt_id: &guard.attempt_id,
        attempt: guard.attempt,
        elapsed,
        capacity_wait: guard.capacity_wait,
        result: report_result,
        probe,
        continued_from: guard.continued_from.as_deref(),
    });
    let span = tracing::Span::current();
    span.record("verdict", tracing::field::debug(verdict));
    span.record("elapsed_ms", elapsed.as_secs_f64() * 1e3);
    if let Err(error) = &result {
        span.record("class", error.class().as_str());
    }
    result
}

#[cfg(all(test, feature = "testkit"))]
mod tests {
    use crate::runtime::{GovernOptions, NoObserver, ScopeConfig};
    use crate::testkit::{echo, start};

    /// A call's future is moved whenever it is boxed, spawned or awaited inside another, so its
    /// size is paid on every call. Hedging's race state, once kept inline in the attempt loop,
    /// made every call's future several times larger, hedged or not, and cost the OpenAI path
    /// about 8 % of its calls per second (issue #45's `stream_ab`); it is boxed now.
    #[tokio::test]
    async fn a_call_future_does_not_carry_the_hedge_race_inline() {
        let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
        let request = "hello".to_string();
        let call = scope.call(&request, &NoObserver, None, GovernOptions::default());
        // 2.8 KiB in a debug build with the race boxed, 6.6 KiB with it inline.
        let size = std::mem::size_of_val(&call);
        assert!(
            size <= 4096,
            "a call's future is {size} bytes: box a large, rarely taken branch of the call path"
        );
        drop(call);
        runtime.shutdown(std::time::Duration::from_secs(1)).await;
    }
}
