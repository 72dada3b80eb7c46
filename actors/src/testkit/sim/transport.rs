//! A source's simulated upstream ([`SimTransport`]): each attempt's answer drawn from the source's
//! fault process, after a virtual-time latency, with its stream deltas.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::outcome::{FailureClass, SourceReason};
use crate::ports::transport::{EventSink, StreamCut, Transport};
use rand::rngs::SmallRng;
use rand::Rng;

use super::faults::{Answer, SimError};
use super::params::{Ms, SCRIPT_LATENCY, TOOL_DELTA};
use super::sleep::Sleep;
use super::state::{lock, State};
/// One simulated call's request.
#[derive(Debug)]
pub(crate) struct SimRequest {
    pub(super) call: usize,
    pub(super) streaming: bool,
    /// A continuation of the stream the given source cut.
    pub(super) continues_from: Option<usize>,
}

/// A source's upstream: answers drawn from its fault process after a virtual-time latency.
#[derive(Debug)]
pub(crate) struct SimTransport {
    pub(super) index: usize,
    pub(super) state: Arc<Mutex<State>>,
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

impl State {
    /// The attempt's answer, drawn from the source's fault process: (duration, answer, stream
    /// deltas delivered before it).
    pub(super) fn plan_attempt(
        &mut self,
        request: &SimRequest,
        source: usize,
    ) -> (Ms, Answer, u64) {
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
}
