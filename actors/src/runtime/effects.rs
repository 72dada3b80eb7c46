//! The production effects of the call driver.
//!
//! A call runs in the caller's task (or, for streams, in a task the stream owns), so dropping the
//! caller's future is cancellation: every resource it holds is an RAII guard — the pacer slot
//! (`SourceTicket`), the admission `Permit` (lease and probe), timers — and is released on drop
//! with no verdict. Actors are messaged, never awaited on I/O.
//!
//! Per attempt: select (router) → breaker + six gates (admission) → transport → report
//! (source actor, admission, observer). `driver.rs` performs those steps in order through
//! [`CallEffects`]; this file implements them with tokio and the scope's actors. Every decision
//! (retry, switch, backoff, wait, stall, the `retry_after` hint) is made by the sans-I/O
//! `CallMachine`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::sync::oneshot;

use crate::policy::pacer::PacerObservation;
use crate::ports::attempt::{AttemptOutcome, BreakerStatus};
use crate::ports::transport::{EventSink, Transport};

#[cfg(feature = "testkit")]
use super::admission::AdmissionMsg;
use super::admission::{AdmitAnswer, AdmitRequest, BreakerAnswer, Permit};
use super::driver::{self, CallEffects};
use super::error::RuntimeError;
use super::governed::{CallFailure, GovernOptions, Governed};
use super::ids::new_id;
use super::metrics::ScopeMetrics;
use super::observer::CallObserver;
use super::router::{RouterMsg, Selection};
use super::scope::{ScopeConfig, ScopeInner};
use super::shared::SourceShared;
use super::waiting_room::WaitingRoom;

/// Production effects: tokio and the scope's actors. The router actor selects, the admission
/// actor's door admits and settles, the source actor hears each attempt (a cast), timers are
/// tokio's, and time is the scope's `Clock`.
impl<T: Transport> CallEffects<T> for ScopeInner<T> {
    type BreakerAnswer = BreakerAnswer;

    fn config(&self) -> &ScopeConfig {
        &self.config
    }

    fn sources(&self) -> &[Arc<SourceShared<T>>] {
        &self.sources
    }

    fn metrics(&self) -> &ScopeMetrics {
        &self.metrics
    }

    fn now(&self) -> Instant {
        self.clock.now()
    }

    fn rng(&self) -> SmallRng {
        SmallRng::from_rng(&mut rand::rng())
    }

    fn new_id(&self) -> String {
        new_id()
    }

    async fn select(
        &self,
        exclude: Vec<usize>,
        avoid: Option<usize>,
    ) -> Result<Selection<T>, RuntimeError> {
        let stopped = || RuntimeError::Stopped {
            actor: format!("router:{}", self.config.name),
            cause: "its mailbox is closed".into(),
        };
        let (reply, answer) = oneshot::channel();
        let router = self.router.get()?;
        router
            .cast(RouterMsg::Select {
                exclude,
                avoid,
                reply,
            })
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())
    }

    async fn admit(&self, request: AdmitRequest) -> AdmitAnswer {
        self.admission.door()?.admit(request).await
    }

    fn settle(
        &self,
        permit: Permit,
        outcome: AttemptOutcome,
        answer: bool,
    ) -> Option<Self::BreakerAnswer> {
        match self.admission.door() {
            Ok(door) => door.settle(permit, outcome, answer),
            Err(e) => {
                tracing::warn!(scope = %self.config.name, reason = %e.message,
                    "admission down; bookkeeping dropped (lease TTL reclaims)");
                None
            }
        }
    }

    async fn breaker_after(&self, answer: Self::BreakerAnswer) -> Option<BreakerStatus> {
        answer.await.ok().flatten()
    }

    fn report(&self, source: &SourceShared<T>, observation: PacerObservation) {
        source.report(observation);
    }

    async fn backoff(&self, wait: Duration) {
        tokio::time::sleep(wait).await;
    }

    async fn wait(&self, wait: Duration) {
        tokio::time::sleep(wait).await;
    }

    fn room(&self) -> &WaitingRoom {
        &self.room
    }

    async fn progress(&self) -> Option<Duration> {
        let door = self.admission.door().ok()?;
        door.progress_age(&self.config.name).await.ok()?
    }

    fn hedging(&self) -> Option<&super::hedge::Hedging> {
        self.hedging.as_ref()
    }

    fn continuing(&self) -> Option<&super::continuation::Continuing> {
        self.continuing.as_ref()
    }
}

impl<T: Transport> ScopeInner<T> {
    /// Run one governed call through the driver with the production effects. Here rather than
    /// in `Scope::call`: the driver reads `scope`'s types, so `scope` naming the driver would
    /// make an import cycle (`tests/import_cycles.rs`).
    pub(crate) async fn run(
        &self,
        request: &T::Request,
        observer: &dyn CallObserver<T>,
        events: Option<&EventSink<T::Event>>,
        options: GovernOptions,
    ) -> Result<Governed<T::Response>, CallFailure<T::Error>> {
        driver::run(self, request, observer, events, options).await
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
