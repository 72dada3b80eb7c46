//! Structured output (docs/behaviour.md §9.2): turning a chat answer into JSON or into the caller's type.
//!
//! The pieces are pure and separately testable: [`repair`] (almost-JSON → `Value`),
//! [`validate`](mod@validate) (`Value` → `T`, errors with paths), [`schema`] (strict JSON Schema and
//! `response_format` bodies), [`mode`] (how one attempt carries the schema to its source's
//! provider; `source_mode` remembers a source that refused a mode) and [`ladder`] (the
//! prevent → repair → validate → re-ask driver, generic over how a question is asked). Governance of each ask (admission, breaker exemption of
//! re-asks, telemetry) belongs to the runtime that supplies the ask function.

pub mod ladder;
pub mod mode;
pub mod repair;
pub mod schema;
pub(crate) mod shape;
pub(crate) mod source_mode;
pub mod validate;

pub use ladder::{rehydrate, run_ladder, LadderMode, LadderOutcome, LadderPlan};
pub use mode::{SchemaRequest, StructuredMode};
pub use repair::{repair_json, Normalizer, RepairError};
pub use schema::{json_object_format, response_format_for, schema_name, strict_schema};
pub use validate::validate;
