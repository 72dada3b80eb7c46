//! Domain-free governance runtime for polygateway.
//!
//! This crate holds the supervised actors (runtime supervisor, scope router, source actors,
//! admission, telemetry) and the sans-I/O policies they run (breaker, AIMD pacer, health EWMA,
//! selection, backoff, stall window, in-memory six-gate limiter). It is generic over small ports
//! ([`Transport`], [`GateBackend`], [`BreakerBackend`], telemetry sinks) and knows nothing of
//! OpenAI, SSE, SQL or HTTP; the `polygateway` crate supplies those.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![deny(unreachable_pub)]

mod clock;
pub(crate) mod machine;
pub mod memory;
mod outcome;
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
