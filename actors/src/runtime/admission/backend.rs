//! Backend work off the caller's path: every call bounded by the governance timeout
//! ([`bounded`]), and finishes retried a few times before the lease TTL is left to reclaim their
//! slots ([`finish`], [`finish_all`]). Their timers are the door's [`Tasks`]'.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::Either;

use crate::ports::attempt::{AttemptBackend, AttemptOutcome, BreakerStatus, PendingFinish};
use crate::ports::BackendError;

use super::permit::Permit;
use super::tasks::Tasks;

/// Run a backend call under the governance timeout; a timeout is a backend error.
pub(super) async fn bounded<R>(
    tasks: &dyn Tasks,
    timeout: Duration,
    fut: impl Future<Output = Result<R, BackendError>>,
) -> Result<R, BackendError> {
    match futures::future::select(std::pin::pin!(fut), tasks.sleep(timeout)).await {
        Either::Left((result, _)) => result,
        Either::Right(_) => Err(BackendError::new(format!(
            "governance backend did not answer within {timeout:?}"
        ))),
    }
}

/// Settle a permit; the breaker state it left (published to the source's gauge), or `None` when
/// the finish failed. A failure only
/// logs: the call's result (or its cancellation) already happened and must not be hidden by
/// bookkeeping (docs/behaviour.md §5.3 degrade direction); the lease and probe TTLs reclaim what
/// a failed finish could not give back.
pub(super) async fn finish(
    tasks: &dyn Tasks,
    attempts: &Arc<dyn AttemptBackend>,
    permit: &Permit,
    outcome: AttemptOutcome,
) -> Option<BreakerStatus> {
    let finished = retrying(tasks, || {
        attempts.finish(&permit.attempt, &permit.breaker, outcome)
    })
    .await;
    match finished {
        Ok(status) => {
            permit.gauge.seen(status.state());
            Some(status)
        }
        Err(e) => {
            let lease = &permit.attempt.lease;
            tracing::warn!(scope = %lease.scope, source = %lease.source, error = %e,
                "finishing an attempt failed (the lease TTL reclaims its slot)");
            None
        }
    }
}

/// Apply held finishes (one scope's) nobody waits for; a failure only logs, as in [`finish`].
pub(super) async fn finish_all(
    tasks: &dyn Tasks,
    attempts: &Arc<dyn AttemptBackend>,
    pending: &[PendingFinish],
) {
    let Some(first) = pending.first() else {
        return;
    };
    if let Err(e) = retrying(tasks, || attempts.finish_all(pending)).await {
        tracing::warn!(scope = %first.permit.lease.scope, finishes = pending.len(), error = %e,
            "finishing attempts failed (the lease TTL reclaims their slots)");
    }
}

/// Run a finish: it is idempotent (its lease id is its verdict id), so a backend that is
/// reconnecting gets a few more tries before the slot is left to the lease TTL.
async fn retrying<R, Fut>(
    tasks: &dyn Tasks,
    mut call: impl FnMut() -> Fut,
) -> Result<R, BackendError>
where
    Fut: Future<Output = Result<R, BackendError>>,
{
    let mut pause = FINISH_RETRY_FIRST;
    let mut tries_left = FINISH_TRIES;
    loop {
        tries_left -= 1;
        match call().await {
            Err(_) if tries_left > 0 => {
                tasks.sleep(pause).await;
                pause *= 2;
            }
            done => return done,
        }
    }
}

/// Tries of one finish, and the pause before the first retry (doubling): about 1.75 s in all.
const FINISH_TRIES: u32 = 4;
const FINISH_RETRY_FIRST: Duration = Duration::from_millis(250);
