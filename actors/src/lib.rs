//! Domain-free governance runtime for polygateway.
//!
//! This crate holds the supervised actors (runtime supervisor, scope router, source actors,
//! admission, telemetry) and the sans-I/O policies they run (breaker, AIMD pacer, health EWMA,
//! selection, backoff, stall clock, in-memory six-gate limiter). It is generic over small ports
//! ([`Transport`], [`GateBackend`], [`BreakerBackend`], telemetry sinks) and knows nothing of
//! OpenAI, SSE, SQL or HTTP; the `polygateway` crate supplies those.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![deny(unreachable_pub)]

pub mod clock;
pub(crate) mod machine;
pub mod memory;
pub mod outcome;
pub mod policy;
pub mod ports;
pub mod runtime;
pub mod telemetry;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use clock::{Clock, TokioClock};
pub use outcome::{AttemptVerdict, Classify, FailureClass, SourceReason};
pub use ports::attempt::{
    AttemptAdmit, AttemptBackend, AttemptOutcome, AttemptPermit, BreakerAction, BreakerStatus,
    ComposedAttempts, PendingFinish,
};
pub use ports::breaker::{
    BreakerAdmit, BreakerBackend, BreakerConfig, BreakerSnapshot, BreakerState, BreakerVerdict,
};
pub use ports::budget::{
    BudgetClaim, BudgetDecision, BudgetExhausted, BudgetLease, BudgetPeriod, BudgetRequest,
    BudgetSpend, BudgetWindow,
};
pub use ports::gate::{Gate, GateBackend, GateDecision, GateRequest, Lease, Limits};
pub use ports::transport::{ConsumerGone, EventSink, StreamCut, Transport};
pub use ports::BackendError;

/// Runtime assembly for the `polygateway` crate, not API: the pieces it needs across the crate
/// boundary to assemble a gateway (a restartable actor's slot, call ids, the telemetry actor and
/// its queue, which it spawns under the runtime supervisor with its own row type). They are `pub`
/// only because a sibling crate cannot see `pub(crate)`; hidden from the docs, exempt from semver,
/// and a user never needs them (ARCHITECTURE.md "Public API").
#[doc(hidden)]
pub mod assembly {
    pub use crate::runtime::ids::new_id;
    pub use crate::runtime::slot::ActorSlot;
    pub use crate::telemetry::actor::{
        FlushReport, TelemetryActor, TelemetryArgs, TelemetryMsg, TelemetryState,
    };
    pub use crate::telemetry::queue::TelemetryQueue;
}
