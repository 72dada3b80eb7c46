//! The per-attempt hook through which the embedding crate records telemetry and metrics.
//!
//! The runtime calls [`CallObserver::on_attempt`] exactly once per attempt that reached the
//! transport (including attempts cancelled by their caller) and [`CallObserver::on_terminal`] once
//! for a call that failed before any attempt was made. Observers must not block: they push to a
//! bounded queue and return.

use std::time::Duration;

use crate::ports::transport::Transport;

use super::governed::CallFailure;

/// How one attempt ended.
///
/// ```
/// # use std::time::Duration;
/// # use polygateway_actors::runtime::{GovernOptions, ScopeConfig};
/// # use polygateway_actors::testkit::{echo, start, Echo, EchoError};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
/// use std::sync::Mutex;
/// use polygateway_actors::runtime::{AttemptReport, AttemptResult, CallObserver, TerminalReport};
///
/// #[derive(Default)]
/// struct Results(Mutex<Vec<String>>);
/// impl CallObserver<Echo> for Results {
///     fn on_attempt(&self, report: &AttemptReport<'_, Echo>) {
///         let line = match &report.result {
///             AttemptResult::Ok(text) => format!("ok: {text}"),
///             AttemptResult::Err(error) => format!("error: {error}"),
///             AttemptResult::Cancelled => "cancelled".to_string(),
///             AttemptResult::HedgeCancelled => "hedge_cancelled".to_string(),
///         };
///         self.0.lock().unwrap().push(line);
///     }
///     fn on_terminal(&self, _report: &TerminalReport<'_, EchoError>) {}
/// }
///
/// let results = Results::default();
/// scope.call(&"hi".to_string(), &results, None, GovernOptions::default()).await.unwrap();
/// // The caller gives up on an upstream that never answers: that attempt ends `Cancelled`.
/// let hang = "hang".to_string();
/// let slow = scope.call(&hang, &results, None, GovernOptions::default());
/// assert!(tokio::time::timeout(Duration::from_millis(200), slow).await.is_err());
/// assert_eq!(*results.0.lock().unwrap(), ["ok: hi", "cancelled"]);
/// # runtime.shutdown(Duration::from_secs(1)).await;
/// # }
/// ```
pub enum AttemptResult<'a, T: Transport> {
    /// The transport answered.
    Ok(&'a T::Response),
    /// The transport failed with a classified error.
    Err(&'a T::Error),
    /// The caller went away (dropped its future or stream) during the attempt.
    Cancelled,
    /// A hedge of the same call produced its first token first (docs/behaviour.md §5.9): the
    /// attempt was cancelled at once, with no verdict.
    HedgeCancelled,
}

/// One finished attempt.
///
/// ```
/// # use std::time::Duration;
/// # use polygateway_actors::runtime::{GovernOptions, ScopeConfig};
/// # use polygateway_actors::testkit::{echo, start, Echo, EchoError};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
/// use std::sync::Mutex;
/// use polygateway_actors::runtime::{AttemptReport, CallObserver, TerminalReport};
///
/// #[derive(Default)]
/// struct Attempts(Mutex<Vec<(String, String, u32, bool)>>);
/// impl CallObserver<Echo> for Attempts {
///     fn on_attempt(&self, r: &AttemptReport<'_, Echo>) {
///         let row = (r.source.to_string(), r.attempt_id.to_string(), r.attempt, r.probe);
///         self.0.lock().unwrap().push(row);
///     }
///     fn on_terminal(&self, _report: &TerminalReport<'_, EchoError>) {}
/// }
///
/// let attempts = Attempts::default();
/// let governed = scope.call(&"hi".to_string(), &attempts, None, GovernOptions::default()).await.unwrap();
/// // The attempt that answered is the one the call returns.
/// let rows = attempts.0.lock().unwrap();
/// assert_eq!(*rows, [("echo_1".to_string(), governed.attempt_id.clone(), 1, false)]);
/// # runtime.shutdown(Duration::from_secs(1)).await;
/// # }
/// ```
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
    /// Time the call waited for capacity (pacer slot, gates, cooldown, 429 pushback) since its
    /// previous attempt, or since it started: the rows of one call add up to its wait.
    pub capacity_wait: Duration,
    /// How it ended.
    pub result: AttemptResult<'a, T>,
    /// `true` if this attempt was a half-open probe.
    pub probe: bool,
    /// The source whose stream, cut after content, this attempt continues (docs/behaviour.md
    /// §5.10); `None` for every other attempt.
    pub continued_from: Option<&'a str>,
}

/// A call that failed before any attempt reached the transport.
///
/// ```
/// # use std::time::Duration;
/// # use polygateway_actors::runtime::{GovernOptions, ScopeConfig};
/// # use polygateway_actors::testkit::{start, Echo, EchoError};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Mutex;
/// use polygateway_actors::runtime::{AttemptReport, CallObserver, TerminalReport};
///
/// #[derive(Default)]
/// struct Terminals(Mutex<Vec<String>>);
/// impl CallObserver<Echo> for Terminals {
///     fn on_attempt(&self, _report: &AttemptReport<'_, Echo>) {}
///     fn on_terminal(&self, r: &TerminalReport<'_, EchoError>) {
///         self.0.lock().unwrap().push(format!("{} {}", r.scope, r.failure.kind()));
///     }
/// }
///
/// // A scope without sources fails every call before any attempt.
/// let (runtime, scope) = start(ScopeConfig::new("OCR"), vec![]).await;
/// let terminals = Terminals::default();
/// let failure = scope.call(&"page".to_string(), &terminals, None, GovernOptions::default()).await.unwrap_err();
/// assert_eq!(failure.kind(), "no_sources");
/// assert_eq!(*terminals.0.lock().unwrap(), ["OCR no_sources"]);
/// # runtime.shutdown(Duration::from_secs(1)).await;
/// # }
/// ```
#[derive(Debug)]
pub struct TerminalReport<'a, E> {
    /// Scope name.
    pub scope: &'a str,
    /// A fresh id for the record.
    pub record_id: &'a str,
    /// Why it failed.
    pub failure: &'a CallFailure<E>,
    /// Time the call waited for capacity before it failed.
    pub capacity_wait: Duration,
}

/// Receives attempt and terminal reports. Implemented by the embedding crate per call (it holds
/// the request's context: messages, tenant, meta…).
///
/// ```
/// # use std::time::Duration;
/// # use polygateway_actors::runtime::{GovernOptions, ScopeConfig};
/// # use polygateway_actors::testkit::{echo, start, Echo, EchoError};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use polygateway_actors::runtime::{AttemptReport, CallFailure, CallObserver, TerminalReport};
///
/// #[derive(Default)]
/// struct Counts { attempts: AtomicU32, terminals: AtomicU32 }
/// impl CallObserver<Echo> for Counts {
///     fn on_attempt(&self, _report: &AttemptReport<'_, Echo>) {
///         self.attempts.fetch_add(1, Ordering::Relaxed);
///     }
///     fn on_terminal(&self, _report: &TerminalReport<'_, EchoError>) {
///         self.terminals.fetch_add(1, Ordering::Relaxed);
///     }
/// }
///
/// let counts = Counts::default();
/// let failure = scope.call(&"reject".to_string(), &counts, None, GovernOptions::default()).await;
/// assert!(matches!(failure, Err(CallFailure::Rejected(_))));
/// // The rejected attempt has its own record, so there is no terminal record.
/// assert_eq!(counts.attempts.load(Ordering::Relaxed), 1);
/// assert_eq!(counts.terminals.load(Ordering::Relaxed), 0);
/// # runtime.shutdown(Duration::from_secs(1)).await;
/// # }
/// ```
pub trait CallObserver<T: Transport>: Send + Sync {
    /// One attempt finished (or was cancelled).
    fn on_attempt(&self, report: &AttemptReport<'_, T>);
    /// The call failed without any attempt.
    fn on_terminal(&self, report: &TerminalReport<'_, T::Error>);
}

/// An observer that records nothing.
///
/// ```
/// # use std::time::Duration;
/// # use polygateway_actors::runtime::{GovernOptions, NoObserver, ScopeConfig};
/// # use polygateway_actors::testkit::{echo, start};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
/// let governed = scope
///     .call(&"fire and forget".to_string(), &NoObserver, None, GovernOptions::default())
///     .await
///     .unwrap();
/// assert_eq!(governed.response, "fire and forget");
/// # runtime.shutdown(Duration::from_secs(1)).await;
/// # }
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl<T: Transport> CallObserver<T> for NoObserver {
    fn on_attempt(&self, _report: &AttemptReport<'_, T>) {}
    fn on_terminal(&self, _report: &TerminalReport<'_, T::Error>) {}
}
