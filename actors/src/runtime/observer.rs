//! The per-attempt hook through which the embedding crate records telemetry and metrics.
//!
//! The runtime calls [`CallObserver::on_attempt`] exactly once per attempt that reached the
//! transport (including attempts cancelled by their caller) and [`CallObserver::on_terminal`] once
//! for a call that failed before any attempt was made. Observers must not block: they push to a
//! bounded queue and return.

use std::time::Duration;

use crate::ports::transport::Transport;

use super::call::CallFailure;

/// How one attempt ended.
pub enum AttemptResult<'a, T: Transport> {
    /// The transport answered.
    Ok(&'a T::Response),
    /// The transport failed with a classified error.
    Err(&'a T::Error),
    /// The caller went away (dropped its future or stream) during the attempt.
    Cancelled,
}

/// One finished attempt.
pub struct AttemptReport<'a, T: Transport> {
    /// Scope name.
    pub scope: &'a str,
    /// Source name.
    pub source: &'a str,
    /// Unique id of this attempt (becomes the response's `call_id`).
    pub attempt_id: &'a str,
    /// 1-based attempt number within the call.
    pub attempt: u32,
    /// Wall time of the attempt.
    pub elapsed: Duration,
    /// How it ended.
    pub result: AttemptResult<'a, T>,
    /// `true` if this attempt was a half-open probe.
    pub probe: bool,
}

/// A call that failed before any attempt reached the transport.
#[derive(Debug)]
pub struct TerminalReport<'a, E> {
    /// Scope name.
    pub scope: &'a str,
    /// A fresh id for the record.
    pub record_id: &'a str,
    /// Why it failed.
    pub failure: &'a CallFailure<E>,
}

/// Receives attempt and terminal reports. Implemented by the embedding crate per call (it holds
/// the request's context: messages, tenant, meta…).
pub trait CallObserver<T: Transport>: Send + Sync {
    /// One attempt finished (or was cancelled).
    fn on_attempt(&self, report: &AttemptReport<'_, T>);
    /// The call failed without any attempt.
    fn on_terminal(&self, report: &TerminalReport<'_, T::Error>);
}

/// An observer that records nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl<T: Transport> CallObserver<T> for NoObserver {
    fn on_attempt(&self, _report: &AttemptReport<'_, T>) {}
    fn on_terminal(&self, _report: &TerminalReport<'_, T::Error>) {}
}
