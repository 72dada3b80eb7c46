//! The governed call path: the one retry loop that serves chat, embeddings and OCR.
//!
//! It runs in the caller's task (or, for streams, in a task the stream owns), so dropping the
//! caller's future is cancellation: every resource it holds is an RAII guard — the pacer slot
//! (`SourceTicket`), the admission `Permit` (lease and probe), timers — and is released on drop
//! with no verdict. Actors are messaged, never awaited on I/O.
//!
//! Per attempt: select (router) → breaker + six gates (admission) → transport → report
//! (source actor, admission, observer). This file is the driver: it performs those I/O steps and
//! the sleeps; every decision (retry, switch, backoff, wait, stall, the `retry_after` hint) is
//! made by the sans-I/O `CallMachine` in `machine.rs`.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::outcome::{AttemptVerdict, Classify, FailureClass, SourceReason};
use crate::policy::pacer::PacerObservation;
use crate::policy::wait_queue::Priority;
use crate::ports::attempt::{AttemptAdmit, AttemptOutcome, BreakerAction, BreakerStatus};
use crate::ports::breaker::BreakerState;
use crate::ports::gate::GateRequest;
use crate::ports::transport::{EventSink, Transport};

#[cfg(feature = "testkit")]
use super::admission::AdmissionMsg;
use super::admission::{AdmitAnswer, AdmitRequest, Permit};
use super::ids::new_id;
use super::machine::{
    settlement, Action, Admission, CallMachine, Ending, Event, Failure, Outcome, Selected,
    SourceFacts,
};
use super::observer::{AttemptReport, AttemptResult, CallObserver, TerminalReport};
use super::router::{RouterMsg, Selection};
use super::scope::ScopeInner;
use super::shared::SourceTicket;
use super::wait::{CapacityWait, WaitReason};
use super::waiting_room::Standing;

/// Why a scope could not serve (docs/behaviour.md §6 scope-level reasons).
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::runtime::{CallFailure, ScopeReason};
/// // Worth retrying later: an open circuit or a full quota clears with time.
/// fn should_retry_later<E>(failure: &CallFailure<E>) -> Option<Duration> {
///     use ScopeReason::{CircuitOpen, QuotaExhausted};
///     match failure {
///         CallFailure::Unavailable { reason: CircuitOpen | QuotaExhausted, retry_after, .. } => {
///             Some(*retry_after)
///         }
///         _ => None,
///     }
/// }
/// let failure = CallFailure::<std::io::Error>::Unavailable {
///     reason: ScopeReason::QuotaExhausted,
///     retry_after: Duration::from_secs(2),
///     per_source: Default::default(),
///     last_error: None,
///     detail: "scope quota full".into(),
/// };
/// assert_eq!(should_retry_later(&failure), Some(Duration::from_secs(2)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScopeReason {
    /// Every breaker refused.
    CircuitOpen,
    /// The attempt budget is spent.
    RetryExhausted,
    /// Waited past the stall window while the scope made no progress.
    Stalled,
    /// A quota gate is full and the scope fails fast.
    QuotaExhausted,
    /// No sources configured.
    NoSources,
    /// The limiter or breaker backend is down.
    GovernanceBackendDown,
    /// The call's deadline passed before it could be served (nothing was sent after it).
    DeadlineExceeded,
}

impl ScopeReason {
    /// The wire name (`circuit_open`, `retry_exhausted`, …).
    ///
    /// ```
    /// use polygateway_actors::runtime::ScopeReason;
    /// assert_eq!(ScopeReason::RetryExhausted.as_str(), "retry_exhausted");
    /// assert_eq!(ScopeReason::GovernanceBackendDown.as_str(), "governance_backend_down");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeReason::CircuitOpen => "circuit_open",
            ScopeReason::RetryExhausted => "retry_exhausted",
            ScopeReason::Stalled => "stalled",
            ScopeReason::QuotaExhausted => "quota_exhausted",
            ScopeReason::NoSources => "no_sources",
            ScopeReason::GovernanceBackendDown => "governance_backend_down",
            ScopeReason::DeadlineExceeded => "deadline_exceeded",
        }
    }
}

/// How a governed call failed.
///
/// Scope-level failures carry the reason of every source that was tried:
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::runtime::{CallFailure, ScopeReason};
/// use polygateway_actors::SourceReason;
/// let failure = CallFailure::<std::io::Error>::Unavailable {
///     reason: ScopeReason::RetryExhausted,
///     retry_after: Duration::ZERO,
///     per_source: [("openai_1".into(), SourceReason::Timeout)].into_iter().collect(),
///     last_error: Some(std::io::Error::other("deadline")),
///     detail: "3 attempt(s) failed".into(),
/// };
/// if let CallFailure::Unavailable { per_source, last_error, .. } = &failure {
///     assert_eq!(per_source["openai_1"], SourceReason::Timeout);
///     assert_eq!(last_error.as_ref().unwrap().to_string(), "deadline");
/// }
/// ```
#[derive(Debug)]
pub enum CallFailure<E> {
    /// The scope cannot serve now.
    Unavailable {
        /// Scope-level reason.
        reason: ScopeReason,
        /// When trying again makes sense (0 = now).
        retry_after: Duration,
        /// Why each source could not serve.
        per_source: BTreeMap<Arc<str>, SourceReason>,
        /// The last attempt error, if any attempt was made.
        last_error: Option<E>,
        /// Human detail (e.g. the backend's error).
        detail: String,
    },
    /// The request was rejected (no retry, no switch).
    Rejected(E),
    /// The answer was unusable.
    Invalid(E),
    /// A streaming attempt failed after deltas reached the consumer: it cannot be retried.
    StreamBroken {
        /// The failure.
        error: E,
        /// Deltas delivered before it.
        delivered: u64,
    },
    /// The runtime or the scope's actors are gone.
    Shutdown(String),
}

impl<E> CallFailure<E> {
    /// A short name of the failure for spans and metrics (`circuit_open`, `rejected`, …).
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::runtime::{CallFailure, ScopeReason};
    /// let rejected = CallFailure::Rejected(std::io::Error::other("400 bad request"));
    /// assert_eq!(rejected.kind(), "rejected");
    /// // Scope-level failures are named by their reason.
    /// let open = CallFailure::<std::io::Error>::Unavailable {
    ///     reason: ScopeReason::CircuitOpen,
    ///     retry_after: Duration::from_secs(30),
    ///     per_source: Default::default(),
    ///     last_error: None,
    ///     detail: String::new(),
    /// };
    /// assert_eq!(open.kind(), "circuit_open");
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            CallFailure::Unavailable { reason, .. } => reason.as_str(),
            CallFailure::Rejected(_) => "rejected",
            CallFailure::Invalid(_) => "invalid",
            CallFailure::StreamBroken { .. } => "stream_broken",
            CallFailure::Shutdown(_) => "shutdown",
        }
    }
}

/// A successful governed call.
///
/// ```
/// # use std::time::Duration;
/// # use polygateway_actors::runtime::{CallOptions, NoObserver, ScopeConfig};
/// # use polygateway_actors::testkit::{echo, start};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
/// use polygateway_actors::runtime::Governed;
/// let Governed { response, source, attempts, attempt_id, capacity_wait } = scope
///     .call(&"hello".to_string(), &NoObserver, None, CallOptions::default())
///     .await
///     .unwrap();
/// assert_eq!(response, "hello");
/// assert_eq!(&*source, "echo_1");
/// assert_eq!(attempts, 1);
/// assert!(!attempt_id.is_empty());
/// // An idle scope had capacity at once.
/// assert_eq!(capacity_wait, Duration::ZERO);
/// # runtime.shutdown(Duration::from_secs(1)).await;
/// # }
/// ```
#[derive(Debug)]
pub struct Governed<R> {
    /// The transport's answer.
    pub response: R,
    /// Id of the attempt that produced it.
    pub attempt_id: String,
    /// Source that answered.
    pub source: Arc<str>,
    /// Attempts made (all, including 429 pushbacks).
    pub attempts: u32,
    /// Time the call waited for capacity before its attempts were sent: a pacer slot, a quota
    /// gate, sources cooling down, a 429 pushback. The back-off before retrying a transient
    /// failure is not counted (it is the retry's, not a wait for capacity).
    pub capacity_wait: Duration,
}

/// Options of one governed call.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::policy::wait_queue::Priority;
/// use polygateway_actors::runtime::CallOptions;
/// // An ordinary call feeds its verdict to the breaker …
/// assert!(!CallOptions::default().breaker_exempt);
/// // … a re-ask after unusable structured output does not.
/// let reask = CallOptions { breaker_exempt: true, ..CallOptions::default() };
/// assert!(reask.breaker_exempt);
/// // An interactive call of tenant "acme" (weight 2) that must be answered within 5 s.
/// let urgent = CallOptions {
///     priority: Priority::Interactive,
///     deadline: Some(Duration::from_secs(5)),
///     tenant: Some("acme".into()),
///     weight: 2,
///     ..CallOptions::default()
/// };
/// assert_eq!(CallOptions::default().weight, 1);
/// # let _ = urgent;
/// ```
#[derive(Debug, Clone)]
pub struct CallOptions {
    /// A structured-output re-ask: its verdict never counts toward the breaker (docs/behaviour.md §9.2).
    pub breaker_exempt: bool,
    /// The call's class in the scope's waiting room (docs/behaviour.md §5.7).
    pub priority: Priority,
    /// How long the call may take from when it starts: past it the call ends
    /// [`ScopeReason::DeadlineExceeded`] and nothing more is sent.
    pub deadline: Option<Duration>,
    /// The fair-share key among waiting calls of one class (`None`: the unattributed share).
    pub tenant: Option<Arc<str>>,
    /// The tenant's turns per round while tenants wait (0 counts as 1).
    pub weight: u32,
}

impl Default for CallOptions {
    fn default() -> Self {
        Self {
            breaker_exempt: false,
            priority: Priority::Normal,
            deadline: None,
            tenant: None,
            weight: 1,
        }
    }
}

/// What the call's loop leaves for its caller whatever the result: whether an attempt reached a
/// transport, and how long the call waited for capacity.
#[derive(Debug, Default)]
struct CallTrace {
    attempted: bool,
    capacity_wait: CapacityWait,
}

/// What the source's pacer learns from one attempt: latency, `Retry-After` and rate-limit
/// headers, read here so the source actor gets plain values (cheap to send per attempt).
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
struct AttemptGuard<'a, T: Transport> {
    scope: &'a ScopeInner<T>,
    observer: &'a dyn CallObserver<T>,
    ticket: SourceTicket<T>,
    permit: Option<Permit>,
    attempt_id: String,
    attempt: u32,
    started: Instant,
    /// Capacity wait since the previous attempt (or the call's start).
    capacity_wait: Duration,
    /// The breaker state the settlement of a failed attempt left, once admission answers.
    breaker_after: Option<oneshot::Receiver<Option<BreakerStatus>>>,
}

impl<T: Transport> AttemptGuard<'_, T> {
    /// Send the permit's finish; with `answer`, keep the receiver of the breaker state it leaves.
    fn settle(&mut self, action: BreakerAction, tokens: u64, progress: bool, answer: bool) {
        if let Some(permit) = self.permit.take() {
            let reply = answer.then(|| {
                let (reply, receiver) = oneshot::channel();
                self.breaker_after = Some(receiver);
                reply
            });
            let outcome = AttemptOutcome {
                action,
                tokens,
                progress,
            };
            match self.scope.admission.door() {
                Ok(door) => door.finish(permit, outcome, reply),
                Err(e) => tracing::warn!(scope = %self.scope.config.name, reason = %e.message,
                    "admission down; bookkeeping dropped (lease TTL reclaims)"),
            }
        }
    }
}

impl<T: Transport> Drop for AttemptGuard<'_, T> {
    fn drop(&mut self) {
        if self.permit.is_none() {
            return;
        }
        let probe = self
            .permit
            .as_ref()
            .is_some_and(|p| p.attempt.probe_id.is_some());
        let tokens = self
            .permit
            .as_ref()
            .map_or(0, |p| p.attempt.lease.est_tokens);
        self.settle(BreakerAction::NoVerdict, tokens, false, false);
        let source = self.ticket.source();
        source.counters.cancelled.fetch_add(1, Ordering::Relaxed);
        source.metrics.attempt(None);
        self.observer.on_attempt(&AttemptReport {
            scope: &self.scope.config.name,
            source: &source.name,
            attempt_id: &self.attempt_id,
            attempt: self.attempt,
            elapsed: self.started.elapsed(),
            capacity_wait: self.capacity_wait,
            result: AttemptResult::Cancelled,
            probe,
        });
    }
}

impl<T: Transport> ScopeInner<T> {
    /// Run one governed call. See the module docs.
    pub(crate) async fn run(
        &self,
        request: &T::Request,
        observer: &dyn CallObserver<T>,
        events: Option<&EventSink<T::Event>>,
        options: CallOptions,
    ) -> Result<Governed<T::Response>, CallFailure<T::Error>> {
        let mut trace = CallTrace::default();
        let result = self
            .run_loop(request, observer, events, options, &mut trace)
            .await;
        self.metrics.capacity_waited(&trace.capacity_wait);
        if let Err(failure) = &result {
            // Terminal records only for calls that never reached a transport: every attempt
            // already has its own record.
            if matches!(failure, CallFailure::Unavailable { .. }) && !trace.attempted {
                let record_id = new_id();
                observer.on_terminal(&TerminalReport {
                    scope: &self.config.name,
                    record_id: &record_id,
                    failure,
                    capacity_wait: trace.capacity_wait.total(),
                });
            }
        }
        result
    }

    /// The driver: performs the machine's actions (router, admission, transport, timers) and
    /// feeds back what happened. Every decision is in `machine.rs`.
    async fn run_loop(
        &self,
        request: &T::Request,
        observer: &dyn CallObserver<T>,
        events: Option<&EventSink<T::Event>>,
        options: CallOptions,
        trace: &mut CallTrace,
    ) -> Result<Governed<T::Response>, CallFailure<T::Error>> {
        let now = self.clock.now();
        let facts = self.sources.iter().map(|s| SourceFacts {
            cooldown: s.breaker.cooldown,
            cooling_until: s.cooling_until(now),
        });
        let mut machine = CallMachine::new(
            &self.config,
            facts,
            SmallRng::from_rng(&mut rand::rng()),
            now,
        );
        let deadline = options.deadline.map(|d| now + d);
        if deadline.is_some() {
            let floors = self.sources.iter().map(|s| s.attempt_floor()).collect();
            machine.set_deadline(deadline, floors);
        }
        // The call's place among waiting calls (docs/behaviour.md §5.7).
        let mut standing = Standing::new(
            &self.room,
            options.priority,
            options.tenant.clone(),
            options.weight,
            deadline,
            self.config.poll_interval,
        );
        // The pacer slot of the source just picked, then the permit admission granted for it.
        let mut picked: Option<SourceTicket<T>> = None;
        let mut permit: Option<Permit> = None;
        let mut answered: Option<(T::Response, String, Arc<str>)> = None;
        let mut last_error: Option<T::Error> = None;
        let mut step = machine.start();
        loop {
            if let Some((index, until)) = step.cool {
                self.sources[index].cool_until(until);
            }
            let event = match step.action {
                Action::Select { exclude, avoid } => {
                    // Behind calls already waiting, in their order; free when nobody waits.
                    let in_time = if self.room.busy() {
                        let queued_at = self.clock.now();
                        let in_time = standing.before_select().await.is_ok();
                        machine.queued(self.clock.now().saturating_duration_since(queued_at));
                        in_time
                    } else {
                        standing.before_select().await.is_ok()
                    };
                    if !in_time {
                        // The deadline passed in the queue: the machine ends the call.
                        let nothing = Selected::NoneEligible {
                            earliest_cooling: None,
                            paced: true,
                        };
                        step = machine.step(Event::Selected(nothing), self.clock.now());
                        trace.capacity_wait = machine.capacity_wait();
                        continue;
                    }
                    Event::Selected(match self.select(exclude, avoid).await? {
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
                            ..
                        } => Selected::NoneEligible {
                            earliest_cooling,
                            paced,
                        },
                    })
                }
                Action::Admit { .. } => {
                    // A refused pick drops its ticket here: the pacer slot goes back at once.
                    let ticket = picked.take().expect("admit follows a pick");
                    let asked = Instant::now();
                    let answer = self.admit(&ticket).await;
                    self.metrics.admission_waited(asked.elapsed().as_secs_f64());
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
                        self.metrics.retry();
                    }
                    trace.attempted = true;
                    let mut guard = AttemptGuard {
                        scope: self,
                        observer,
                        ticket: picked.take().expect("send follows a pick"),
                        permit: permit.take(),
                        attempt_id: new_id(),
                        attempt,
                        started: Instant::now(),
                        capacity_wait: machine.last_attempt_wait(),
                        breaker_after: None,
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
                    let result = self
                        .attempt(&mut guard, request, events, options.breaker_exempt)
                        .instrument(span)
                        .await;
                    let source = Arc::clone(&guard.ticket.source().name);
                    let attempt_id = std::mem::take(&mut guard.attempt_id);
                    let breaker_after = guard.breaker_after.take();
                    drop(guard);
                    Event::Attempted(match result {
                        Ok(response) => {
                            answered = Some((response, attempt_id, source));
                            Outcome::Ok
                        }
                        Err(error) => {
                            // The finish was sent before the pacer and observer heard of the
                            // attempt; its answer is usually here already.
                            let breaker = match breaker_after {
                                Some(answer) => answer.await.ok().flatten(),
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
                Action::Wait(wait)
                    if matches!(
                        machine.wait_reason(),
                        Some(WaitReason::Gate | WaitReason::Cooldown)
                    ) =>
                {
                    // The room waits until then and only its head tries: waiters released
                    // together would overshoot the gate.
                    let retry_at = self.clock.now() + wait;
                    let _ = standing.await_capacity(Some(retry_at)).await;
                    Event::Woke
                }
                Action::Backoff(wait) | Action::Wait(wait) => {
                    tokio::time::sleep(wait).await;
                    Event::Woke
                }
                Action::AwaitSlot(_) => {
                    // Bounded by the room's poll and the call's deadline.
                    let _ = standing.await_capacity(None).await;
                    Event::Woke
                }
                Action::AskProgress => Event::Progress(self.progress_age().await),
                Action::Finish(ending) => {
                    return self.finish(ending, &machine, answered, last_error)
                }
            };
            step = machine.step(event, self.clock.now());
            trace.capacity_wait = machine.capacity_wait();
        }
    }

    /// Attach the response or the last error to the machine's ending.
    fn finish(
        &self,
        ending: Ending,
        machine: &CallMachine,
        answered: Option<(T::Response, String, Arc<str>)>,
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
                    .map(|(&index, &reason)| (Arc::clone(&self.sources[index].name), reason))
                    .collect(),
                last_error,
                detail,
            }),
        }
    }
    /// One attempt through the transport, reported to source, admission and observer.
    async fn attempt(
        &self,
        guard: &mut AttemptGuard<'_, T>,
        request: &T::Request,
        events: Option<&EventSink<T::Event>>,
        breaker_exempt: bool,
    ) -> Result<T::Response, T::Error> {
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
        let sent = self.clock.now();
        let result = source.transport.send(request, events).await;
        let elapsed = guard.started.elapsed();
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
        source.report(pacer_observation::<T>(
            &result,
            verdict,
            sent,
            self.clock.now(),
            source.in_flight(),
        ));
        source.metrics.attempt(Some(verdict));
        let report_result = match &result {
            Ok(response) => AttemptResult::Ok(response),
            Err(error) => AttemptResult::Err(error),
        };
        guard.observer.on_attempt(&AttemptReport {
            scope: &self.config.name,
            source: &source.name,
            attempt_id: &guard.attempt_id,
            attempt: guard.attempt,
            elapsed,
            capacity_wait: guard.capacity_wait,
            result: report_result,
            probe,
        });
        let span = tracing::Span::current();
        span.record("verdict", tracing::field::debug(verdict));
        span.record("elapsed_ms", elapsed.as_secs_f64() * 1e3);
        if let Err(error) = &result {
            span.record("class", error.class().as_str());
        }
        result
    }

    async fn select(
        &self,
        exclude: Vec<usize>,
        avoid: Option<usize>,
    ) -> Result<Selection<T>, CallFailure<T::Error>> {
        let (reply, answer) = oneshot::channel();
        let router = self.router.get().map_err(CallFailure::Shutdown)?;
        router
            .cast(RouterMsg::Select {
                exclude,
                avoid,
                reply,
            })
            .map_err(|_| {
                CallFailure::Shutdown(format!("scope {} router stopped", self.config.name))
            })?;
        answer.await.map_err(|_| {
            CallFailure::Shutdown(format!("scope {} router stopped", self.config.name))
        })
    }

    async fn admit(&self, ticket: &SourceTicket<T>) -> AdmitAnswer {
        let source = ticket.source();
        let request = AdmitRequest {
            gate: GateRequest {
                scope: Arc::clone(&self.config.name),
                source: Arc::clone(&source.name),
                global: self.config.global,
                per_source: source.limits,
                est_tokens: source.est_tokens,
                lease_id: new_id().into(),
                lease_ttl: self.config.lease_ttl,
            },
            breaker: source.breaker.clone(),
            gauge: Arc::clone(&source.metrics.breaker),
        };
        self.admission.door()?.admit(request).await
    }

    async fn progress_age(&self) -> Option<Duration> {
        let door = self.admission.door().ok()?;
        door.progress_age(&self.config.name).await.ok()?
    }

    /// The chaos hooks' way to the scope's actors (test builds only: calls never message them).
    #[cfg(feature = "testkit")]
    pub(crate) fn send_router(&self, message: RouterMsg<T>) {
        if let Ok(router) = self.router.get() {
            let _ = router.cast(message);
        }
    }

    #[cfg(feature = "testkit")]
    pub(crate) fn send_admission(&self, message: AdmissionMsg) {
        match self.admission.actor.get() {
            Ok(admission) => {
                if admission.cast(message).is_err() {
                    tracing::warn!(scope = %self.config.name, "admission actor gone; message dropped");
                }
            }
            Err(reason) => {
                tracing::warn!(scope = %self.config.name, %reason, "admission actor down; message dropped");
            }
        }
    }
}
