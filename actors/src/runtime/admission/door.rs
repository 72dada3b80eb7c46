//! The [`Door`]: the backends a running admission actor publishes, which a call's task reaches
//! directly (no mailbox hop on the hot path), and its finish of a permit — sent at once, or held
//! for the scope's next admission to carry (`carry`). Asking for a permit is in `admitting`.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::ports::attempt::{AttemptBackend, AttemptOutcome, BreakerStatus, PendingFinish};
use crate::ports::gate::GateBackend;
use crate::ports::BackendError;

use super::backend::{bounded, finish, finish_all};
use super::carry::{may_hold, Held, CARRY_WAIT};
use super::permit::Permit;
use super::tasks::Tasks;

/// The answer a finish sends when its caller asks for it: the breaker state it left (`None` when
/// the finish failed or never ran).
pub(crate) type BreakerAnswer = oneshot::Receiver<Option<BreakerStatus>>;

/// What a running admission actor publishes for the call path: the backends it built, their
/// bound, and where work that outlives a call runs (the runtime's task tracker).
#[derive(Debug)]
pub(crate) struct Door {
    /// `governance.attempts`, or the composition of its gate and breakers.
    pub(super) attempts: Arc<dyn AttemptBackend>,
    /// The limiter (the scope's progress clock).
    pub(super) gate: Arc<dyn GateBackend>,
    /// Bound of a backend call the backend does not bound itself.
    pub(super) timeout: Duration,
    /// Backend work that outlives the call that started it (network backends), so shutdown can
    /// let it finish: one tracker per runtime, shared by every incarnation of the actor (the
    /// simulator's executor in the simulator).
    pub(super) tasks: Arc<dyn Tasks>,
    /// Finishes held back for their scope's next admission to carry.
    pub(super) held: Arc<Held>,
    /// Permits handed to calls and not finished yet: a finish is held only while others are
    /// outstanding (their calls admit again soon); the last one goes out at once, overlapping
    /// its caller's own work.
    pub(super) outstanding: AtomicUsize,
}

impl Door {
    /// A door to `attempts` (and `gate`, the scope's progress clock), every backend call bounded
    /// by `timeout` where the backend does not bound it, its background work run by `tasks`.
    pub(crate) fn new(
        attempts: Arc<dyn AttemptBackend>,
        gate: Arc<dyn GateBackend>,
        timeout: Duration,
        tasks: Arc<dyn Tasks>,
    ) -> Self {
        Self {
            attempts,
            gate,
            timeout,
            tasks,
            held: Arc::default(),
            outstanding: AtomicUsize::new(0),
        }
    }

    /// [`finish`](Self::finish) a permit; with `answer`, the receiver of the breaker state it
    /// leaves.
    pub(crate) fn settle(
        &self,
        permit: Permit,
        outcome: AttemptOutcome,
        answer: bool,
    ) -> Option<BreakerAnswer> {
        let (reply, receiver) = match answer {
            true => {
                let (reply, receiver) = oneshot::channel();
                (Some(reply), Some(receiver))
            }
            false => (None, None),
        };
        self.finish(permit, outcome, reply);
        receiver
    }

    /// Settle a permit: breaker action, TPM settlement, lease release and (`progress`) the
    /// scope's progress mark. With `reply`, send the breaker state it left (`None` when the
    /// finish failed). Never waits: the work runs in place while it needs no I/O, the rest in a
    /// tracked task — or, with a backend that carries finishes, a success or a verdict-less end
    /// nobody waits for is held for the scope's next admission ([`Held`]).
    pub(crate) fn finish(
        &self,
        permit: Permit,
        outcome: AttemptOutcome,
        reply: Option<oneshot::Sender<Option<BreakerStatus>>>,
    ) {
        // Saturating: a permit granted by a previous incarnation may end here.
        let others = self
            .outstanding
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .map_or(0, |n| n - 1);
        if others > 0
            && self.attempts.carries_finishes()
            && may_hold(&permit, &outcome, reply.is_some())
        {
            let scope = Arc::clone(&permit.attempt.lease.scope);
            let pending = PendingFinish {
                permit: permit.attempt,
                breaker: permit.breaker,
                outcome,
            };
            if self.held.push(pending) {
                let (held, attempts) = (Arc::clone(&self.held), Arc::clone(&self.attempts));
                let tasks = Arc::clone(&self.tasks);
                self.tasks.spawn(Box::pin(async move {
                    tasks.sleep(CARRY_WAIT).await;
                    finish_all(&*tasks, &attempts, &held.remove(&scope)).await;
                }));
            }
            return;
        }
        let (tasks, attempts) = (Arc::clone(&self.tasks), Arc::clone(&self.attempts));
        self.run(async move {
            let status = finish(&*tasks, &attempts, &permit, outcome).await;
            if let Some(reply) = reply {
                let _ = reply.send(status);
            }
        });
    }

    /// How long since `scope` last progressed, bounded by the governance timeout.
    pub(crate) async fn progress_age(&self, scope: &str) -> Result<Option<Duration>, BackendError> {
        bounded(&*self.tasks, self.timeout, self.gate.progress_age(scope)).await
    }

    /// Run backend work that must complete whoever waits for it: polled once here (in-memory
    /// backends finish in that poll), handed to a tracked task if it has to wait for I/O.
    fn run(&self, work: impl Future<Output = ()> + Send + 'static) {
        if !self.tasks.can_run() {
            tracing::warn!("no runtime to run governance work on (lease TTL reclaims)");
            return;
        }
        let mut work = Box::pin(work);
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        if work.as_mut().poll(&mut cx).is_pending() {
            // The task's first poll registers its own waker (every poll does).
            self.tasks.spawn(work);
        }
    }
}
