//! The core of a governed call, without I/O: the [`CallMachine`](call::CallMachine) that makes
//! every decision of one call, and the values it decides with — its slice of the scope's
//! configuration ([`CallPolicy`](policy::CallPolicy)), the scope-level reasons a call fails with
//! ([`ScopeReason`](reason::ScopeReason)) and the capacity-wait accounting
//! ([`CapacityWait`](wait::CapacityWait)).
//!
//! It is a layer: it depends on the policies, the ports' value types and the outcome
//! classification, and on nothing in `runtime/`. The runtime's driver (`runtime/driver.rs`)
//! performs its actions, in production and in the simulator alike. Time is `Instant`, passed in.

pub(crate) mod call;
pub(crate) mod policy;
pub(crate) mod reason;
pub(crate) mod wait;
