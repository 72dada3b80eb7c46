//! The governance backend the production [`Door`](crate::runtime::admission::Door) talks to in
//! the simulator ([`SimAttempts`]): the memory gate and breakers, answering at once, or — with
//! [`run_seed_over_network`](super::run_seed_over_network) — as a network backend would, each
//! call a round trip of virtual time that carries finishes (so the door holds them for the next
//! admission, `carry.rs`), and in a backend-down window every call fails. The door's retries,
//! held finishes and the compensation of abandoned admissions then run here, on the simulator's
//! clock.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::FutureExt;

use crate::ports::attempt::{
    AttemptAdmit, AttemptBackend, AttemptOutcome, AttemptPermit, BreakerStatus, ComposedAttempts,
    PendingFinish,
};
use crate::ports::breaker::{BreakerBackend, BreakerConfig};
use crate::ports::gate::GateRequest;
use crate::ports::BackendError;

use super::params::{ms, Ms, SCOPE};
use super::sleep::Sleep;
use super::state::{lock, LeaseBook, State};

/// The simulated governance backend.
#[derive(Debug)]
pub(super) struct SimAttempts {
    pub(super) inner: ComposedAttempts,
    pub(super) breakers: Arc<dyn BreakerBackend>,
    pub(super) state: Arc<Mutex<State>>,
    /// The round trip of each backend call; `None` for an in-memory backend (answers in the
    /// first poll, carries nothing).
    pub(super) round_trip: Option<Ms>,
    /// Source names in index order (a finish's lease names its source).
    pub(super) sources: Vec<Arc<str>>,
}

impl SimAttempts {
    /// One round trip, then the backend's answer unless it is down.
    async fn reach(&self) -> Result<(), BackendError> {
        if let Some(round_trip) = self.round_trip {
            Sleep::new(Arc::clone(&self.state), round_trip).await;
        }
        match lock(&self.state).down() {
            true => Err(BackendError::new("simulated backend down")),
            false => Ok(()),
        }
    }

    /// After a finish was applied: the source's breaker epoch never goes back, and a breaker the
    /// call's own attempt opened is what the call knows of that source.
    fn finished(&self, permit: &AttemptPermit, breaker: &BreakerConfig, status: BreakerStatus) {
        let lease = &permit.lease;
        let source = self
            .sources
            .iter()
            .position(|s| *s == lease.source)
            .expect("a source of the scope");
        let epoch = self
            .breakers
            .snapshot(SCOPE, &lease.source, breaker)
            .now_or_never()
            .expect("the memory breakers answer without waiting")
            .map_or(0, |b| b.epoch);
        let mut state = lock(&self.state);
        // A grant its call never saw (the call went away during the admission) has no call.
        let Some(LeaseBook { call, beside }) = state.leases.remove(&lease.id) else {
            return;
        };
        state.check_epoch(call, source, epoch);
        // A hedge's or continuation's failure teaches the call's machine nothing (§5.9, §5.10):
        // the breaker it opened is not what the call knows.
        if let (BreakerStatus::Open { retry_after }, None) = (status, beside) {
            let now = state.now;
            let known = &mut state.calls[call].known_ready[source];
            *known = (*known).max(now + ms(retry_after));
        }
    }
}

#[async_trait]
impl AttemptBackend for SimAttempts {
    async fn admit(
        &self,
        request: &GateRequest,
        breaker: &BreakerConfig,
    ) -> Result<AttemptAdmit, BackendError> {
        self.reach().await?;
        self.inner.admit(request, breaker).await
    }

    async fn finish(
        &self,
        permit: &AttemptPermit,
        breaker: &BreakerConfig,
        outcome: AttemptOutcome,
    ) -> Result<BreakerStatus, BackendError> {
        self.reach().await?;
        let status = self.inner.finish(permit, breaker, outcome).await?;
        self.finished(permit, breaker, status);
        Ok(status)
    }

    fn carries_finishes(&self) -> bool {
        self.round_trip.is_some()
    }

    async fn admit_after(
        &self,
        pending: &[PendingFinish],
        request: &GateRequest,
        breaker: &BreakerConfig,
    ) -> Result<AttemptAdmit, BackendError> {
        self.reach().await?;
        self.apply(pending).await?;
        lock(&self.state).carried_finishes += pending.len() as u64;
        self.inner.admit(request, breaker).await
    }

    async fn finish_all(&self, pending: &[PendingFinish]) -> Result<(), BackendError> {
        self.reach().await?;
        self.apply(pending).await
    }
}

impl SimAttempts {
    /// Finishes carried in one round trip, in order.
    async fn apply(&self, pending: &[PendingFinish]) -> Result<(), BackendError> {
        for p in pending {
            let status = self.inner.finish(&p.permit, &p.breaker, p.outcome).await?;
            self.finished(&p.permit, &p.breaker, status);
        }
        Ok(())
    }
}
