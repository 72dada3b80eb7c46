//! The small traits the runtime is generic over. Concrete backends live elsewhere: the in-memory
//! ones in [`crate::memory`], Redis and HTTP ones in the `polygateway` crate.

pub mod attempt;
pub mod breaker;
pub mod budget;
pub mod gate;
pub mod transport;

/// A governance backend (limiter or breaker store) could not answer. Callers fail closed
/// (docs/behaviour.md §10.6): this never lets a call through ungoverned.
///
/// ```
/// use polygateway_actors::BackendError;
/// let e = BackendError { message: "redis: connection refused".into() };
/// assert_eq!(e.to_string(), "governance backend error: redis: connection refused");
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[error("governance backend error: {message}")]
pub struct BackendError {
    /// What went wrong, free of secrets.
    pub message: String,
}

impl BackendError {
    /// Build an error from any message.
    ///
    /// ```
    /// use polygateway_actors::BackendError;
    /// fn admit(reachable: bool) -> Result<(), BackendError> {
    ///     if reachable { Ok(()) } else { Err(BackendError::new("limiter script timed out")) }
    /// }
    /// assert_eq!(admit(false).unwrap_err().message, "limiter script timed out");
    /// ```
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}
