//! The governed call path: the one retry loop that serves chat, embeddings and OCR.
//!
//! It runs in the caller's task (or, for streams, in a task the stream owns), so dropping the
//! caller's future is cancellation: every resource it holds is an RAII guard — the pacer slot
//! (`SourceTicket`), the admission `Permit` (lease and probe), timers — and is released on drop
//! with no verdict. Actors are messaged, never awaited on I/O.
//!
//! Per attempt: select (router) → breaker + six gates (admission) → transport → report
//! (source actor, admission, observer). Dispatch on refusals is by reason, never by the number of
//! sources: breaker refusals feed the local cooldown memo and the circuit-open path; gate
//! refusals feed the quota path.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::outcome::{AttemptVerdict, Classify, FailureClass, SourceReason};
use crate::policy::backoff::Backoff;
use crate::policy::pacer::PacerObservation;
use crate::policy::stall::StallClock;
use crate::ports::breaker::{BreakerState, BreakerVerdict};
use crate::ports::gate::GateRequest;
use crate::ports::transport::{EventSink, Transport};

use super::admission::{AdmissionMsg, AdmitAnswer, AdmitRequest, BreakerAction, Permit};
use super::ids::new_id;
use super::observer::{AttemptReport, AttemptResult, CallObserver, TerminalReport};
use super::router::{RouterMsg, Selection};
use super::scope::ScopeInner;
use super::shared::SourceTicket;

/// Why a scope could not serve (SPEC §6 scope-level reasons).
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
/// let Governed { response, source, attempts, attempt_id } = scope
///     .call(&"hello".to_string(), &NoObserver, None, CallOptions::default())
///     .await
///     .unwrap();
/// assert_eq!(response, "hello");
/// assert_eq!(&*source, "echo_1");
/// assert_eq!(attempts, 1);
/// assert!(!attempt_id.is_empty());
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
}

/// Options of one governed call.
///
/// ```
/// use polygateway_actors::runtime::CallOptions;
/// // An ordinary call feeds its verdict to the breaker …
/// assert!(!CallOptions::default().breaker_exempt);
/// // … a re-ask after unusable structured output does not.
/// let reask = CallOptions { breaker_exempt: true };
/// assert!(reask.breaker_exempt);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct CallOptions {
    /// A structured-output re-ask: its verdict never counts toward the breaker (SPEC §9.2).
    pub breaker_exempt: bool,
}

struct Failures<E> {
    per_source: BTreeMap<Arc<str>, SourceReason>,
    last_error: Option<E>,
    min_retry_after: Option<Duration>,
}

impl<E> Failures<E> {
    fn note(&mut self, source: &Arc<str>, reason: SourceReason, retry_after: Option<Duration>) {
        // An open breaker is the consequence of a dead source, not a new reason.
        let keep_dead = reason == SourceReason::CircuitOpen
            && self.per_source.get(source) == Some(&SourceReason::SourceDead);
        if !keep_dead {
            self.per_source.insert(Arc::clone(source), reason);
        }
        if let Some(r) = retry_after {
            self.min_retry_after = Some(self.min_retry_after.map_or(r, |m| m.min(r)));
        }
    }

    fn unavailable(
        self,
        reason: ScopeReason,
        retry_after: Duration,
        detail: String,
    ) -> CallFailure<E> {
        CallFailure::Unavailable {
            reason,
            retry_after,
            per_source: self.per_source,
            last_error: self.last_error,
            detail,
        }
    }
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

/// An admitted attempt in flight. Dropped without [`AttemptGuard::finish`] it is a cancelled
/// attempt: the permit is settled at its estimate with no breaker verdict, the observer records
/// `cancelled`, and the pacer slot is freed.
struct AttemptGuard<'a, T: Transport> {
    scope: &'a ScopeInner<T>,
    observer: &'a dyn CallObserver<T>,
    ticket: SourceTicket<T>,
    permit: Option<Permit>,
    attempt_id: String,
    attempt: u32,
    started: Instant,
}

impl<T: Transport> AttemptGuard<'_, T> {
    fn settle(&mut self, action: BreakerAction, tokens: u64, progress: bool) {
        if let Some(permit) = self.permit.take() {
            self.scope.send_admission(AdmissionMsg::Finish {
                permit,
                progress,
                action,
                tokens,
            });
        }
    }
}

impl<T: Transport> Drop for AttemptGuard<'_, T> {
    fn drop(&mut self) {
        if self.permit.is_none() {
            return;
        }
        let probe = self.permit.as_ref().is_some_and(|p| p.probe_id.is_some());
        let tokens = self.permit.as_ref().map_or(0, |p| p.lease.est_tokens);
        self.settle(BreakerAction::NoVerdict, tokens, false);
        let source = self.ticket.source();
        source.counters.cancelled.fetch_add(1, Ordering::Relaxed);
        source.metrics.attempt(None);
        self.observer.on_attempt(&AttemptReport {
            scope: &self.scope.config.name,
            source: &source.name,
            attempt_id: &self.attempt_id,
            attempt: self.attempt,
            elapsed: self.started.elapsed(),
            result: AttemptResult::Cancelled,
            probe,
        });
    }
}

/// What the loop does after a refusal or failure.
enum Next {
    /// Try again now.
    Again,
    /// Every eligible source's pacer is full: wait until a slot is freed (bounded by the poll
    /// interval). Counts as non-productive waiting.
    Paced,
    /// Non-productive wait (counts toward the stall window), then try again.
    Wait(Duration),
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
        let mut attempted = false;
        let result = self
            .run_loop(request, observer, events, options, &mut attempted)
            .await;
        if let Err(failure) = &result {
            // Terminal records only for calls that never reached a transport: every attempt
            // already has its own record.
            if matches!(failure, CallFailure::Unavailable { .. }) && !attempted {
                let record_id = new_id();
                observer.on_terminal(&TerminalReport {
                    scope: &self.config.name,
                    record_id: &record_id,
                    failure,
                });
            }
        }
        result
    }

    async fn run_loop(
        &self,
        request: &T::Request,
        observer: &dyn CallObserver<T>,
        events: Option<&EventSink<T::Event>>,
        options: CallOptions,
        attempted: &mut bool,
    ) -> Result<Governed<T::Response>, CallFailure<T::Error>> {
        let config = &self.config;
        let mut failures = Failures {
            per_source: BTreeMap::new(),
            last_error: None,
            min_retry_after: None,
        };
        let mut budget_used = 0u32;
        let mut attempt_no = 0u32;
        let mut excluded: Vec<usize> = Vec::new();
        let mut quota_hint: Option<Duration> = None;
        let mut round_cooling: Option<std::time::Instant> = None;
        let mut avoid: Option<usize> = None;
        let mut stall = StallClock::new(config.stall_window, self.clock.now());

        loop {
            let selection = self.select(excluded.clone(), avoid).await?;
            let next = match selection {
                Selection::NoneEligible {
                    no_sources: true, ..
                } => {
                    return Err(failures.unavailable(
                        ScopeReason::NoSources,
                        Duration::ZERO,
                        format!("scope {} has no sources", config.name),
                    ))
                }
                Selection::NoneEligible {
                    earliest_cooling,
                    paced,
                    ..
                } => {
                    if let Some(hint) = quota_hint {
                        if config.quota_full_fails_fast {
                            return Err(failures.unavailable(
                                ScopeReason::QuotaExhausted,
                                hint,
                                "every eligible source's quota is full".into(),
                            ));
                        }
                        Next::Wait(hint.min(config.poll_interval))
                    } else if paced {
                        // Backpressure from the pacers: wait for a slot to come back.
                        Next::Paced
                    } else {
                        let now = self.clock.now();
                        // The memo may lag the refusals of this round (it is updated by cast).
                        let earliest = match (earliest_cooling, round_cooling) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                        let wait =
                            earliest.map_or(Duration::ZERO, |t| t.saturating_duration_since(now));
                        if !config.circuit_open_waits {
                            return Err(failures.unavailable(
                                ScopeReason::CircuitOpen,
                                wait,
                                "every source's circuit is open".into(),
                            ));
                        }
                        // Never shortened: sleep to the earliest cooldown end, plus jitter.
                        let jitter = Duration::from_millis(rand::rng().random_range(0..=50));
                        Next::Wait(wait + jitter)
                    }
                }
                Selection::Picked(ticket) => {
                    let index = ticket.source().index;
                    let asked = Instant::now();
                    let answer = self.admit(&ticket).await;
                    self.metrics.admission_waited(asked.elapsed().as_secs_f64());
                    match &answer {
                        AdmitAnswer::Admitted(p) => {
                            ticket.source().breaker_seen(if p.probe_id.is_some() {
                                BreakerState::HalfOpen
                            } else {
                                BreakerState::Closed
                            })
                        }
                        AdmitAnswer::BreakerRefused { state, .. } => {
                            ticket.source().breaker_seen(*state)
                        }
                        _ => {}
                    }
                    match answer {
                        AdmitAnswer::BackendDown(detail) => {
                            return Err(failures.unavailable(
                                ScopeReason::GovernanceBackendDown,
                                Duration::from_secs(5),
                                detail,
                            ))
                        }
                        AdmitAnswer::BreakerRefused { state, retry_after } => {
                            let source = ticket.source();
                            source
                                .counters
                                .breaker_refusals
                                .fetch_add(1, Ordering::Relaxed);
                            failures.note(
                                &source.name,
                                SourceReason::CircuitOpen,
                                Some(retry_after),
                            );
                            if state == BreakerState::Open {
                                let until = self.clock.now() + retry_after;
                                round_cooling = Some(round_cooling.map_or(until, |r| r.min(until)));
                                ticket.source().cool_until(until);
                            }
                            excluded.push(index);
                            Next::Again
                        }
                        AdmitAnswer::GateRefused { gate, retry_after } => {
                            if gate.is_global() {
                                if config.quota_full_fails_fast {
                                    return Err(failures.unavailable(
                                        ScopeReason::QuotaExhausted,
                                        retry_after,
                                        format!("scope quota full ({gate:?})"),
                                    ));
                                }
                                Next::Wait(retry_after.min(config.poll_interval))
                            } else {
                                excluded.push(index);
                                quota_hint =
                                    Some(quota_hint.map_or(retry_after, |q| q.min(retry_after)));
                                Next::Again
                            }
                        }
                        AdmitAnswer::Admitted(permit) => {
                            attempt_no += 1;
                            budget_used += 1;
                            if attempt_no > 1 {
                                self.metrics.retry();
                            }
                            *attempted = true;
                            let mut guard = AttemptGuard {
                                scope: self,
                                observer,
                                ticket,
                                permit: Some(permit),
                                attempt_id: new_id(),
                                attempt: attempt_no,
                                started: Instant::now(),
                            };
                            let span = tracing::info_span!(
                                "pgw.attempt",
                                source = %guard.ticket.source().name,
                                attempt = attempt_no,
                                probe = guard.permit.as_ref().is_some_and(|p| p.probe_id.is_some()),
                                verdict = tracing::field::Empty,
                                class = tracing::field::Empty,
                                elapsed_ms = tracing::field::Empty,
                            );
                            match self
                                .attempt(&mut guard, request, events, options)
                                .instrument(span)
                                .await
                            {
                                Ok(response) => {
                                    let source = Arc::clone(&guard.ticket.source().name);
                                    return Ok(Governed {
                                        response,
                                        attempt_id: std::mem::take(&mut guard.attempt_id),
                                        source,
                                        attempts: attempt_no,
                                    });
                                }
                                Err(error) => {
                                    let source = Arc::clone(guard.ticket.source());
                                    drop(guard);
                                    let delivered = events.map_or(0, EventSink::delivered);
                                    if delivered > 0 {
                                        return Err(CallFailure::StreamBroken { error, delivered });
                                    }
                                    match error.class() {
                                        FailureClass::RequestRejected => {
                                            return Err(CallFailure::Rejected(error))
                                        }
                                        FailureClass::ResultInvalid => {
                                            return Err(CallFailure::Invalid(error))
                                        }
                                        _ => {}
                                    }
                                    failures.note(
                                        &source.name,
                                        error.source_reason(),
                                        error.retry_after(),
                                    );
                                    avoid = Some(index);
                                    let rate_limited = error.is_rate_limited();
                                    let dead = error.class() == FailureClass::SourceDead;
                                    let hint = error.retry_after();
                                    failures.last_error = Some(error);
                                    if dead {
                                        source
                                            .cool_until(self.clock.now() + source.breaker.cooldown);
                                    }
                                    if rate_limited {
                                        // Pushback: no budget spent; the wait counts as stalling.
                                        budget_used -= 1;
                                        Next::Wait(self.backoff(attempt_no, hint))
                                    } else if budget_used >= config.max_attempts {
                                        let retry_after =
                                            failures.min_retry_after.unwrap_or(Duration::ZERO);
                                        return Err(failures.unavailable(
                                            ScopeReason::RetryExhausted,
                                            retry_after,
                                            format!("{} attempt(s) failed", budget_used),
                                        ));
                                    } else if dead {
                                        Next::Again
                                    } else {
                                        // Transient backoff is attempt time, not stall time.
                                        tokio::time::sleep(self.backoff(budget_used, hint)).await;
                                        Next::Again
                                    }
                                }
                            }
                        }
                    }
                }
            };
            let wait = match next {
                Next::Again => continue,
                Next::Paced => {
                    let began = self.clock.now();
                    let _ = tokio::time::timeout(config.poll_interval, self.slot_freed.notified())
                        .await;
                    stall.record_wait(self.clock.now().saturating_duration_since(began));
                    excluded.clear();
                    quota_hint = None;
                    round_cooling = None;
                    continue;
                }
                Next::Wait(wait) => wait,
            };
            {
                // Condition (A) is local and cheap; ask the backend for (B) only once it holds.
                let progress_age = if stall.waited() >= config.stall_window {
                    self.progress_age().await
                } else {
                    Some(Duration::ZERO)
                };
                if stall.is_stalled(progress_age) {
                    let retry_after = failures.min_retry_after.unwrap_or(Duration::ZERO);
                    return Err(failures.unavailable(
                        ScopeReason::Stalled,
                        retry_after,
                        format!("waited {:?} without progress in the scope", stall.waited()),
                    ));
                }
                // Once the budget is spent but the scope is progressing, keep waiting at the
                // natural pace: clamping to a zero budget would spin.
                let budget = stall.remaining_budget();
                let wait = if budget.is_zero() {
                    wait
                } else {
                    wait.min(budget)
                };
                tokio::time::sleep(wait).await;
                stall.record_wait(wait);
                excluded.clear();
                quota_hint = None;
                round_cooling = None;
            }
        }
    }

    /// One attempt through the transport, reported to source, admission and observer.
    async fn attempt(
        &self,
        guard: &mut AttemptGuard<'_, T>,
        request: &T::Request,
        events: Option<&EventSink<T::Event>>,
        options: CallOptions,
    ) -> Result<T::Response, T::Error> {
        let source = Arc::clone(guard.ticket.source());
        source.counters.attempts.fetch_add(1, Ordering::Relaxed);
        let probe = guard.permit.as_ref().is_some_and(|p| p.probe_id.is_some());
        let est = guard.permit.as_ref().map_or(0, |p| p.lease.est_tokens);
        let sent = self.clock.now();
        let result = source.transport.send(request, events).await;
        let elapsed = guard.started.elapsed();
        let (verdict, action, tokens) = match &result {
            Ok(response) => (
                AttemptVerdict::Success,
                BreakerAction::Record(BreakerVerdict::Success),
                T::tokens_used(response).unwrap_or(est),
            ),
            Err(error) => {
                let verdict = AttemptVerdict::of_error(error);
                let action = match (verdict, error.class()) {
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
                // 4xx and dead sources were refused: refund fully.
                let tokens = match error.class() {
                    FailureClass::Transient if !error.is_rate_limited() => est,
                    _ => 0,
                };
                (verdict, action, tokens)
            }
        };
        let action = match action {
            BreakerAction::Record(_) if options.breaker_exempt => BreakerAction::NoVerdict,
            other => other,
        };
        guard.settle(action, tokens, verdict == AttemptVerdict::Success);
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

    fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let u: f64 = rand::rng().random();
        Backoff::new(self.config.backoff_base, self.config.backoff_max).delay(
            attempt.saturating_sub(1),
            u,
            retry_after,
        )
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
        };
        let (reply, answer) = oneshot::channel();
        let admission = match self.admission.get() {
            Ok(a) => a,
            Err(reason) => return AdmitAnswer::BackendDown(reason),
        };
        if admission.cast(AdmissionMsg::Admit(request, reply)).is_err() {
            return AdmitAnswer::BackendDown("admission actor stopped".into());
        }
        answer
            .await
            .unwrap_or_else(|_| AdmitAnswer::BackendDown("admission actor stopped".into()))
    }

    async fn progress_age(&self) -> Option<Duration> {
        let (reply, answer) = oneshot::channel();
        let admission = self.admission.get().ok()?;
        admission
            .cast(AdmissionMsg::ProgressAge(
                Arc::clone(&self.config.name),
                reply,
            ))
            .ok()?;
        answer.await.ok()?.ok()?
    }

    pub(crate) fn send_router(&self, message: RouterMsg<T>) {
        if let Ok(router) = self.router.get() {
            let _ = router.cast(message);
        }
    }

    pub(crate) fn send_admission(&self, message: AdmissionMsg) {
        match self.admission.get() {
            Ok(admission) => {
                if admission.cast(message).is_err() {
                    tracing::warn!(scope = %self.config.name, "admission actor gone; bookkeeping dropped (lease TTL reclaims)");
                }
            }
            Err(reason) => {
                tracing::warn!(scope = %self.config.name, %reason, "admission actor down; bookkeeping dropped (lease TTL reclaims)");
            }
        }
    }
}
