//! The supervised actor runtime and the one governed call path.
//!
//! See `ARCHITECTURE.md` for the tree and one call's message sequence.

pub mod admission;
pub mod call;
mod ids;
pub(crate) mod machine;
pub mod metrics;
pub mod observer;
pub mod restart;
mod router;
pub mod scope;
pub mod shared;
pub mod slot;
pub mod source;
pub mod supervisor;

pub use admission::{Governance, GovernanceFactory};
pub use call::{CallFailure, CallOptions, Governed, ScopeReason};
pub use ids::new_id;
pub use observer::{AttemptReport, AttemptResult, CallObserver, NoObserver, TerminalReport};
pub use restart::{RestartBudget, RestartDecision, RestartPolicy};
pub use scope::{Scope, ScopeConfig};
pub use shared::{SourceCounters, SourceShared};
pub use slot::ActorSlot;
pub use source::PacerFactory;
pub use supervisor::{Runtime, RuntimeOptions, SourceSpec};
