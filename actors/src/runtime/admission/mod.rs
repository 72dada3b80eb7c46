//! Admission: the door to the governance backends (limiter gates and breakers).
//!
//! Every attempt asks for a `Permit`: the source's breaker first, then all six gates — one
//! [`AttemptBackend::admit`]; a finished attempt is one [`AttemptBackend::finish`] (verdict,
//! settlement, release, progress). With Redis each is one script call, so a successful attempt
//! costs at most two round trips — one when the scope is busy: a finish nobody waits for is held
//! (at most [`CARRY_WAIT`]) and rides on the scope's next admission ([`Held`]).
//!
//! The call's task reaches the backends directly, through the [`Door`] the admission actor
//! publishes when it starts: no mailbox hop on the hot path. Backend work runs in place while it
//! needs no I/O (in-memory backends answer in their first poll) and otherwise in a task of the
//! runtime's tracker, so shutdown can wait for it. An admission runs in the caller's task; a
//! caller that goes away before the answer hands the rest to a tracked task that gives back a
//! grant nobody will use. Every backend call is bounded by a timeout; an error or timeout is
//! answered as an error — fail closed, never a pass (docs/behaviour.md §10.6). A finish whose
//! caller asks for it is answered with the breaker state it left ([`BreakerStatus`]), for the
//! call's `retry_after` hint.
//!
//! The actor owns the door's lifetime: it builds the backends through the [`GovernanceFactory`]
//! in `pre_start` and withdraws the door when it stops, so while it is down (restarting with
//! backoff) admission answers with a backend error, and after a restart calls use the backends
//! the new incarnation built (the gateway's factory returns clones of the same clients; a custom
//! one may reconnect). It holds no per-call state, so a restart loses nothing.
//!
//! Files: `governance` (the backends a runtime is given), `permit` (what an attempt asks and
//! holds), `door` (the published backends and the finish of a permit), `admitting` (asking for a
//! permit, and giving back one whose caller went away), `carry` (which finishes wait for the next
//! admission), `backend` (bounded and retried backend work), `tasks` (where work that outlives
//! a call runs, and its timers), `lifecycle` (the actor and the slot it publishes its door in).

mod admitting;
mod backend;
mod carry;
mod door;
mod governance;
mod lifecycle;
mod permit;
mod tasks;
#[cfg(all(test, feature = "testkit"))]
mod tests;

pub(crate) use door::BreakerAnswer;
pub use governance::{Governance, GovernanceFactory};
#[cfg(feature = "testkit")]
pub(crate) use lifecycle::AdmissionMsg;
pub(crate) use lifecycle::{AdmissionActor, AdmissionArgs, AdmissionSlot};
pub(crate) use permit::{AdmitAnswer, AdmitRequest, Permit};
// The simulator builds a door of its own, over its executor and a simulated backend.
#[cfg(feature = "testkit")]
pub(crate) use {door::Door, tasks::Tasks};
