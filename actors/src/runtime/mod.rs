//! The supervised actor runtime and the one governed call path.
//!
//! See `ARCHITECTURE.md` for the tree and one call's message sequence.

//!
//! What is public here is what a user needs to run governed calls over their own transport:
//! start a [`Runtime`], add a [`Scope`] of sources, call it, read its sources' live state, shut
//! down. The actors, their messages and the call machine are private; the telemetry writer the
//! runtime supervises is started through `telemetry::TelemetryWriter`. [`new_id`] is public for
//! the ids of what a caller records beside the runtime's (calls, leases, completions).

pub(crate) mod admission;
pub(crate) mod continuation;
pub(crate) mod driver;
mod effects;
mod error;
mod governed;
pub(crate) mod hedge;
pub(crate) mod ids;
mod labels;
pub mod metrics;
mod observer;
mod outcome_counts;
mod restart;
pub(crate) mod router;
mod scope;
pub mod series;
mod shared;
pub(crate) mod slot;
pub(crate) mod source;
mod source_msg;
mod supervisor;
pub(crate) mod waiting_room;

pub use crate::machine::reason::ScopeReason;
pub use admission::{Governance, GovernanceFactory};
pub use continuation::ContinueConfig;
pub use error::RuntimeError;
pub use governed::{CallFailure, GovernOptions, Governed};
pub use hedge::HedgeConfig;
pub use ids::new_id;
pub use observer::{AttemptReport, AttemptResult, CallObserver, NoObserver, TerminalReport};
pub use restart::RestartPolicy;
pub use scope::{Scope, ScopeConfig};
pub use shared::{SourceCounters, SourceShared};
pub use source::PacerFactory;
pub use supervisor::{Runtime, RuntimeOptions, SourceSpec};
