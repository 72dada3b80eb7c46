//! The part of a scope's configuration the call machine decides with.

use std::sync::Arc;
use std::time::Duration;

/// What one call's decisions read: its budget, back-off, the quota and circuit paths, the stall
/// guard. Built per call from the scope's configuration (`ScopeConfig::call_policy`), so the
/// machine does not depend on the runtime that holds it.
#[derive(Debug, Clone)]
pub(crate) struct CallPolicy {
    /// Scope name (for the failure's detail).
    pub(crate) scope: Arc<str>,
    /// Attempt budget (429 pushbacks excluded).
    pub(crate) max_attempts: u32,
    /// Back-off of the first retry.
    pub(crate) backoff_base: Duration,
    /// Back-off ceiling.
    pub(crate) backoff_max: Duration,
    /// A full quota ends the call instead of waiting.
    pub(crate) quota_full_fails_fast: bool,
    /// Every circuit open: wait for the earliest cooldown instead of failing.
    pub(crate) circuit_open_waits: bool,
    /// How long a call may wait without the scope making progress.
    pub(crate) stall_window: Duration,
    /// Longest single wait before looking again.
    pub(crate) poll_interval: Duration,
}
