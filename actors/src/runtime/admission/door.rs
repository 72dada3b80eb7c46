//! The [`Door`]: the backends a running admission actor publishes, which a call's task reaches
//! directly (no mailbox hop on the hot path), and its finish of a permit — sent at once, or held
//! for the scope's next admission to carry (`carry`). Asking for a permit is in `admitting`.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use crate::ports::attempt::{AttemptBackend, AttemptOutcome, BreakerStatus, PendingFinish};
use crate::ports::gate::GateBackend;
use crate::ports::BackendError;

use super::backend::{bounded, finish, finish_all, spawn_tracked};
use super::carry::{may_hold, Held, CARRY_WAIT};
use super::permit::Permit;

/// What a running admission actor publishes for the call path: the backends it built, their
/// bound, and the runtime's task tracker.
#[derive(Debug)]
pub(crate) struct Door {
    /// `governance.attempts`, or the composition of its gate and breakers.
    pub(super) attempts: Arc<dyn AttemptBackend>,
    /// The limiter (the scope's progress clock).
    pub(super) gate: Arc<dyn GateBackend>,
    /// Bound of a backend call the backend does not bound itself.
    pub(super) timeout: Duration,
    /// Backend work that outlives the call that started it (network backends), so shutdown can
    /// let it finish. One tracker per runtime, shared by every incarnation of the actor.
    pub(super) tasks: TaskTracker,
    /// Finishes held back for their scope's next admission to carry.
    pub(super) held: Arc<Held>,
    /// Permits handed to calls and not finished yet: a finish is held only while others are
    /// outstanding (their calls admit again soon); the last one goes out at once, overlapping
    /// its caller's own work.
    pub(super) outstanding: AtomicUsize,
}

impl Door {
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
                spawn_tracked(&self.tasks, async move {
                    tokio::time::sleep(CARRY_WAIT).await;
                    finish_all(&attempts, &held.remove(&scope)).await;
                });
            }
            return;
        }
        let attempts = Arc::clone(&self.attempts);
        self.run(async move {
            let status = finish(&attempts, &permit, outcome).await;
            if let Some(reply) = reply {
                let _ = reply.send(status);
            }
        });
    }

    /// How long since `scope` last progressed, bounded by the governance timeout.
    pub(crate) async fn progress_age(&self, scope: &str) -> Result<Option<Duration>, BackendError> {
        bounded(self.timeout, self.gate.progress_age(scope)).await
    }

    /// Run backend work that must complete whoever waits for it: polled once here (in-memory
    /// backends finish in that poll), handed to a tracked task if it has to wait for I/O.
    fn run(&self, work: impl Future<Output = ()> + Send + 'static) {
        if tokio::runtime::Handle::try_current().is_err() {
            // Backends time their calls with Tokio timers: without a runtime nothing can run.
            tracing::warn!("no runtime to run governance work on (lease TTL reclaims)");
            return;
        }
        let mut work = Box::pin(work);
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        if work.as_mut().poll(&mut cx).is_pending() {
            // The task's first poll registers its own waker (every poll does).
            spawn_tracked(&self.tasks, work);
        }
    }
}
