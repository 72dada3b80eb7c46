//! Entry validation (SPEC §2.2). (being built)

/// An entry validation failure.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ValidationError(pub String);
