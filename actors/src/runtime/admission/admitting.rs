//! Asking the [`Door`] for a permit ([`Door::admit`]) and the admission in flight it returns
//! ([`Admitting`]), with its drop compensation: an admission whose caller went away before the
//! answer is completed in a tracked task, and a grant nobody will use is given back.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::ports::attempt::{AttemptAdmit, AttemptOutcome, BreakerAction};
use crate::ports::breaker::BreakerConfig;
use crate::ports::BackendError;

use super::super::metrics::BreakerGauge;
use super::backend::{finish, finish_all};
use super::door::Door;
use super::permit::{AdmitAnswer, AdmitRequest, Permit};

impl Door {
    /// Ask for a permit: breaker first, then the six gates, in one backend call that bounds its
    /// own I/O. It runs in the caller's task; if the caller goes away before the answer (a
    /// cancelled call), the rest runs in a tracked task that undoes a grant nobody will use.
    pub(crate) fn admit(self: Arc<Self>, request: AdmitRequest) -> Admitting {
        let (breaker, gauge) = (request.breaker.clone(), Arc::clone(&request.gauge));
        let door = Arc::clone(&self);
        let carried = self.held.take(&request.gate.scope);
        Admitting {
            work: Some(Box::pin(async move {
                if carried.is_empty() {
                    return door.attempts.admit(&request.gate, &request.breaker).await;
                }
                let answer = door
                    .attempts
                    .admit_after(&carried, &request.gate, &request.breaker)
                    .await;
                if answer.is_err() {
                    // Applied or not, they are sent again (a finish counts once).
                    let (tasks, attempts) = (Arc::clone(&door.tasks), Arc::clone(&door.attempts));
                    door.tasks.spawn(Box::pin(async move {
                        finish_all(&*tasks, &attempts, &carried).await;
                    }));
                }
                answer
            })),
            door: self,
            breaker,
            gauge,
        }
    }
}

type AdmitWork = Pin<Box<dyn Future<Output = AdmitAnswer> + Send>>;

/// An admission in flight, awaited by the call that asked for it ([`Door::admit`]). Dropped
/// before it answered, it hands its work to a tracked task that completes it and gives back a
/// grant nobody will use (settled at its estimate, no breaker verdict).
pub(crate) struct Admitting {
    work: Option<AdmitWork>,
    door: Arc<Door>,
    breaker: BreakerConfig,
    gauge: Arc<BreakerGauge>,
}

impl Future for Admitting {
    type Output = AdmitAnswer;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<AdmitAnswer> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Ready(Err(BackendError::new("admission polled after its answer")));
        };
        let answer = std::task::ready!(work.as_mut().poll(cx));
        self.work = None;
        if let Ok(AttemptAdmit::Admitted(_)) = &answer {
            self.door.outstanding.fetch_add(1, Ordering::Relaxed);
        }
        Poll::Ready(answer)
    }
}

impl Drop for Admitting {
    fn drop(&mut self) {
        let Some(work) = self.work.take() else {
            return;
        };
        let (tasks, attempts) = (
            Arc::clone(&self.door.tasks),
            Arc::clone(&self.door.attempts),
        );
        let (breaker, gauge) = (self.breaker.clone(), Arc::clone(&self.gauge));
        self.door.tasks.spawn(Box::pin(async move {
            if let Ok(AttemptAdmit::Admitted(attempt)) = work.await {
                let outcome = AttemptOutcome {
                    action: BreakerAction::NoVerdict,
                    tokens: attempt.lease.est_tokens,
                    progress: false,
                };
                let permit = Permit {
                    attempt,
                    breaker,
                    gauge,
                };
                finish(&*tasks, &attempts, &permit, outcome).await;
            }
        }));
    }
}
