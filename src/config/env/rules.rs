//! Which assembly rules a parse applies (this runtime's or the original library's) and how the
//! original rules ask for a key they require. Its own file because the parse (`env.rs`) and the
//! scope builder (`scope.rs`) both follow them.

use crate::config::error::ConfigError;

/// Which assembly rules a parse applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rules {
    /// This runtime's: documented defaults fill the optional keys (docs/behaviour.md §3).
    Runtime,
    /// The original Python library's: the keys it made required are required, and no streaming
    /// watchdog is derived (see
    /// [`Settings::from_env_original`](crate::config::Settings::from_env_original)).
    Original,
}

/// How the original library asks for a key it requires ("报什么补什么": name what to add).
pub(super) fn original_requires(key: String, what: &str) -> ConfigError {
    ConfigError::Missing {
        key,
        reason: format!(
            "add it: {what} (the original library's assembly rules, which the Python package \
             keeps, fill in no default for it)"
        ),
    }
}
