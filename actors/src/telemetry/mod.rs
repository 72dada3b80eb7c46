//! Telemetry plumbing, generic over the row type: a bounded queue that lives outside the actor, the
//! sink port, the status snapshot, and the actor that drains the queue into the sink in batches.
//!
//! This module is for moving rows from callers to a sink without ever blocking a caller and without
//! losing accepted rows when the actor restarts. It is not where rows are built, priced, stored or
//! shaped into SQL: the `polygateway` crate owns the row type and the SQLite/PostgreSQL sinks.

//!
//! Public: the sink port, its status, the batching configuration, and the actor with its queue,
//! which a caller spawns under the runtime with its own row type (`Runtime::adopt`), as the
//! `polygateway` crate does.

pub(crate) mod actor;
pub(crate) mod queue;
mod sink;

pub use actor::{
    FlushReport, TelemetryActor, TelemetryArgs, TelemetryConfig, TelemetryMsg, TelemetryState,
};
pub use queue::TelemetryQueue;
pub use sink::{NullSink, TelemetrySink, TelemetryStatus};
