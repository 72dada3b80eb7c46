//! The ports: the small traits the governance runtime is generic over, the types their methods
//! take and return, and the in-memory implementations that ship with the crate. Implement one of
//! these to plug in a part of your own (a limiter or breaker store on another database, a
//! transport for another wire protocol, a test clock) and hand it to
//! [`GatewayBuilder`](crate::GatewayBuilder).
//!
//! The Redis implementations are in [`crate::redis`] (feature `redis`); the telemetry sink port
//! is [`crate::telemetry::TelemetrySink`]; pacers and selectors are in [`crate::policy`]. This
//! module is not the runtime itself: the actors, their messages and the call loop stay private
//! (they live in the `polygateway-actors` crate, which a user of this crate never needs to name).
//!
//! ```
//! use std::sync::Arc;
//! use polygateway::ports::{BreakerBackend, GateBackend, MemoryBreakers, MemoryGate, TokioClock};
//! let gate: Arc<dyn GateBackend> = Arc::new(MemoryGate::new(Arc::new(TokioClock)));
//! let breakers: Arc<dyn BreakerBackend> = Arc::new(MemoryBreakers::default());
//! # let _ = (gate, breakers);
//! ```

pub use polygateway_actors::memory::{ManualClock, MemoryBreakers, MemoryGate};
pub use polygateway_actors::{
    AttemptAdmit, AttemptBackend, AttemptOutcome, AttemptPermit, AttemptVerdict, BackendError,
    BreakerAction, BreakerAdmit, BreakerBackend, BreakerConfig, BreakerSnapshot, BreakerState,
    BreakerStatus, BreakerVerdict, BudgetClaim, BudgetDecision, BudgetExhausted, BudgetLease,
    BudgetPeriod, BudgetRequest, BudgetSpend, BudgetWindow, Classify, Clock, ComposedAttempts,
    ConsumerGone, EventSink, FailureClass, Gate, GateBackend, GateDecision, GateRequest, Lease,
    Limits, PendingFinish, SourceReason, TokioClock, Transport,
};
