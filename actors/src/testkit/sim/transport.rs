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
use super::wire::{meant, Attempt, Read, Sent};
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
        let (after, planned) = {
            let mut state = lock(&self.state);
            if state.script.is_some() {
                state.calls[request.call].sends += 1;
                let answer = state.script.as_mut().and_then(VecDeque::pop_front);
                (SCRIPT_LATENCY, Planned::Scripted(answer.unwrap_or(Ok(()))))
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
        let started = lock(&self.state).now;
        Sleep::new(Arc::clone(&self.state), after).await;
        let sent = match planned {
            Planned::Scripted(answer) => return answer,
            Planned::Unusable(error) => return Err(error),
            Planned::Sends(sent) => sent,
        };
        let read = self.read(request, sent, started, after);
        if let Some(events) = events {
            for piece in 0..read.pieces {
                let piece = if read.tool_call && piece + 1 == read.pieces {
                    lock(&self.state).calls[request.call].tool_delta[self.index] = true;
                    TOOL_DELTA
                } else {
                    piece
                };
                // The consumer is the call's own receiver, alive and never full.
                let _ = events.emit(piece).await;
            }
        }
        match read.failure {
            None => Ok(()),
            Some(failure) => Err(SimError {
                class: failure.class,
                reason: failure.reason,
                rate_limited: failure.rate_limited,
                retry_after: failure.retry_after,
                // Only a caller's stream is continued.
                cut: failure
                    .cut
                    .filter(|_| request.streaming)
                    .map(|tool_call| (self.index, tool_call)),
            }),
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

impl SimTransport {
    /// What this source's transport reads of what its upstream sent (the seed's wire, started at
    /// virtual `started` ms, answered `after` ms later); a reading that is not what was meant is
    /// a violation.
    fn read(&self, request: &SimRequest, sent: Sent, started: Ms, after: Ms) -> Read {
        let (wire, timeout) = {
            let mut state = lock(&self.state);
            state.answers_read += 1;
            (Arc::clone(&state.wire), state.attempt_timeout)
        };
        let attempt = Attempt {
            source: self.index,
            streaming: request.streaming,
            started: Duration::from_millis(started),
            after: Duration::from_millis(after),
            timeout: Duration::from_millis(timeout),
        };
        let read = wire.read(sent, &attempt);
        let meant = meant(sent, request.streaming);
        if read != meant {
            let what = format!(
                "s{} sent {sent:?}, read as {read:?}, meant {meant:?}",
                self.index
            );
            lock(&self.state).violation(request.call, what);
        }
        read
    }
}

/// What an attempt's upstream does.
pub(super) enum Planned {
    /// It sends this, which the seed's wire reads.
    Sends(Sent),
    /// It answers, and the answer is unusable (an embedding of the wrong length, an unreadable
    /// page): the transport's own check, past what the wire reads.
    Unusable(SimError),
    /// The next answer of a scripted schedule.
    Scripted(Answer),
}

impl State {
    /// The attempt's answer, drawn from the source's fault process: (duration, what it does).
    pub(super) fn plan_attempt(&mut self, request: &SimRequest, source: usize) -> (Ms, Planned) {
        let now = self.now;
        self.calls[request.call].sends += 1;
        let timeout = self.attempt_timeout;
        let rng = &mut self.rng;
        let f = &self.faults[source];
        let latency = rng.random_range(f.latency.0..=f.latency.1.max(f.latency.0));
        let hint = |rng: &mut SmallRng| {
            // Whole seconds, as Retry-After is written (RFC 9110 §10.2.3).
            rng.random_bool(f.retry_after)
                .then(|| Duration::from_secs(rng.random_range(1..=10)))
        };
        let within = |window: Option<(Ms, Ms)>| window.is_some_and(|(a, b)| (a..b).contains(&now));
        // A complete answer's pieces: several for a caller that streams, without a draw of the
        // seed's generator (its schedule stays what it was).
        let answer = Planned::Sends(Sent::Answer {
            pieces: if request.streaming {
                1 + request.call as u64 % 4
            } else {
                1
            },
        });
        if within(f.dead) {
            return (latency.min(50), Planned::Sends(Sent::KeyRefused));
        }
        if within(f.pushback) {
            let retry_after = hint(rng);
            return (
                latency.min(100),
                Planned::Sends(Sent::RateLimited { retry_after }),
            );
        }
        if within(f.overloaded) {
            self.overloaded_answers += 1;
            return (latency.min(50), Planned::Sends(Sent::Overloaded));
        }
        let roll: f64 = rng.random();
        let mut edge = 0.0;
        let mut next = |p: f64| {
            edge += p;
            roll < edge
        };
        let (after, planned) = if next(f.black_hole) {
            // The watchdog ends it.
            (timeout, Planned::Sends(Sent::Silent))
        } else if next(f.rate_limited) {
            let retry_after = hint(rng);
            (
                latency.min(100),
                Planned::Sends(Sent::RateLimited { retry_after }),
            )
        } else if next(f.transient) {
            let retry_after = hint(rng);
            (latency, Planned::Sends(Sent::Unavailable { retry_after }))
        } else if next(f.truncate) {
            let pieces = if request.streaming {
                rng.random_range(1..=20)
            } else {
                0
            };
            // One cut in three ends on a tool call's first piece (no draw of the seed's
            // generator: its schedule stays what it was).
            let tool_call = pieces > 0 && (request.call as u64 + pieces) % 3 == 0;
            (latency, Planned::Sends(Sent::Cut { pieces, tool_call }))
        } else if next(f.rejected) {
            (latency, Planned::Sends(Sent::Rejected))
        } else if next(f.invalid) {
            let unusable = SimError {
                class: FailureClass::ResultInvalid,
                reason: SourceReason::NetworkError,
                rate_limited: false,
                retry_after: None,
                cut: None,
            };
            (latency, Planned::Unusable(unusable))
        } else if next(f.slow_first_token) {
            (latency * 10, answer)
        } else {
            (latency, answer)
        };
        // What has not arrived when the attempt's deadline comes is a stall, whatever it was
        // going to be: the watchdog fires first.
        if after >= timeout {
            (timeout, Planned::Sends(Sent::Silent))
        } else {
            (after, planned)
        }
    }
}
