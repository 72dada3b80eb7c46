//! Telemetry plumbing, generic over the row type: the [`TelemetryWriter`] a caller pushes rows
//! into (a bounded queue that lives outside the actor, drained into a sink in batches by an actor
//! the runtime supervises), the sink port, the status snapshot and the batching configuration.
//!
//! This module is for moving rows from callers to a sink without ever blocking a caller and without
//! losing accepted rows when the actor restarts. It is not where rows are built, priced, stored or
//! shaped into SQL: the `polygateway` crate owns the row type and the SQLite/PostgreSQL sinks.
//! The actor, its messages and the queue are private: a writer is all a caller holds.

pub(crate) mod actor;
pub(crate) mod queue;
mod sink;
mod writer;

pub use actor::{FlushReport, TelemetryConfig};
pub use sink::{NullSink, TelemetrySink, TelemetryStatus};
pub use writer::TelemetryWriter;
