//! The small traits the runtime is generic over. Concrete backends live elsewhere: the in-memory
//! ones in [`crate::memory`], Redis and HTTP ones in the `polygateway` crate.

pub mod breaker;
pub mod gate;
pub mod transport;

/// A governance backend (limiter or breaker store) could not answer. Callers fail closed
/// (SPEC §10.6): this never lets a call through ungoverned.
#[derive(Debug, Clone, thiserror::Error)]
#[error("governance backend error: {message}")]
pub struct BackendError {
    /// What went wrong, free of secrets.
    pub message: String,
}

impl BackendError {
    /// Build an error from any message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}
