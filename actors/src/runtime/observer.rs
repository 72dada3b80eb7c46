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
///
/// ```
/// # use std::sync::Arc;
/// # use std::time::Duration;
/// # use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
/// # use polygateway_actors::policy::pacer::{AimdPacer, Pacer};
/// # use polygateway_actors::policy::select::LeastInflight;
/// # use polygateway_actors::runtime::{
/// #     CallOptions, Governance, GovernanceFactory, NoObserver, PacerFactory, Runtime, RuntimeOptions,
/// #     Scope, ScopeConfig, SourceSpec,
/// # };
/// # use polygateway_actors::{BreakerConfig, Classify, EventSink, FailureClass, Limits, SourceReason, Transport};
/// # /// A transport error carrying its class.
/// # #[derive(Debug)]
/// # struct Failed(FailureClass);
/// # impl std::fmt::Display for Failed {
/// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, "{}", self.0.as_str()) }
/// # }
/// # impl std::error::Error for Failed {}
/// # impl Classify for Failed {
/// #     fn class(&self) -> FailureClass { self.0 }
/// #     fn is_rate_limited(&self) -> bool { false }
/// #     fn retry_after(&self) -> Option<Duration> { None }
/// #     fn source_reason(&self) -> SourceReason {
/// #         match self.0 { FailureClass::SourceDead => SourceReason::SourceDead, _ => SourceReason::NetworkError }
/// #     }
/// # }
/// # /// Echoes its request (one event per word when streaming); "hang", "fail", "reject" and "dead"
/// # /// never answer, fail transiently, are rejected, or find the source dead.
/// # struct Echo;
/// # #[async_trait::async_trait]
/// # impl Transport for Echo {
/// #     type Request = String;
/// #     type Response = String;
/// #     type Event = String;
/// #     type Error = Failed;
/// #     async fn send(&self, request: &String, events: Option<&EventSink<String>>) -> Result<String, Failed> {
/// #         match request.as_str() {
/// #             "hang" => std::future::pending().await,
/// #             "fail" => Err(Failed(FailureClass::Transient)),
/// #             "reject" => Err(Failed(FailureClass::RequestRejected)),
/// #             "dead" => Err(Failed(FailureClass::SourceDead)),
/// #             text => {
/// #                 if let Some(sink) = events {
/// #                     for word in text.split(' ') { let _ = sink.emit(word.to_string()).await; }
/// #                 }
/// #                 Ok(text.to_string())
/// #             }
/// #         }
/// #     }
/// #     fn tokens_used(_: &String) -> Option<u64> { None }
/// # }
/// # fn memory_governance() -> GovernanceFactory {
/// #     let governance = Governance {
/// #         gate: Arc::new(MemoryGate::default()),
/// #         breakers: Arc::new(MemoryBreakers::default()),
/// #         inline: true,
/// #         timeout: Duration::from_secs(1),
/// #     };
/// #     Arc::new(move || { let g = governance.clone(); Box::pin(async move { Ok(g) }) })
/// # }
/// # fn echo(name: &str) -> SourceSpec<Echo> {
/// #     SourceSpec { name: name.into(), transport: Arc::new(Echo), breaker: BreakerConfig::default(), limits: Limits::default(), est_tokens: 10 }
/// # }
/// # fn aimd() -> PacerFactory {
/// #     Arc::new(|limits: &Limits| Box::new(AimdPacer::new(limits.max_concurrency)) as Box<dyn Pacer>)
/// # }
/// # async fn start(config: ScopeConfig, sources: Vec<SourceSpec<Echo>>) -> (Runtime, Scope<Echo>) {
/// #     let runtime = Runtime::start(memory_governance(), RuntimeOptions::default()).await.unwrap();
/// #     let scope = runtime.add_scope(config, sources, Box::new(LeastInflight), aimd()).await.unwrap();
/// #     (runtime, scope)
/// # }
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
///         };
///         self.0.lock().unwrap().push(line);
///     }
///     fn on_terminal(&self, _report: &TerminalReport<'_, Failed>) {}
/// }
///
/// let results = Results::default();
/// scope.call(&"hi".to_string(), &results, None, CallOptions::default()).await.unwrap();
/// // The caller gives up on an upstream that never answers: that attempt ends `Cancelled`.
/// let hang = "hang".to_string();
/// let slow = scope.call(&hang, &results, None, CallOptions::default());
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
}

/// One finished attempt.
///
/// ```
/// # use std::sync::Arc;
/// # use std::time::Duration;
/// # use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
/// # use polygateway_actors::policy::pacer::{AimdPacer, Pacer};
/// # use polygateway_actors::policy::select::LeastInflight;
/// # use polygateway_actors::runtime::{
/// #     CallOptions, Governance, GovernanceFactory, NoObserver, PacerFactory, Runtime, RuntimeOptions,
/// #     Scope, ScopeConfig, SourceSpec,
/// # };
/// # use polygateway_actors::{BreakerConfig, Classify, EventSink, FailureClass, Limits, SourceReason, Transport};
/// # /// A transport error carrying its class.
/// # #[derive(Debug)]
/// # struct Failed(FailureClass);
/// # impl std::fmt::Display for Failed {
/// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, "{}", self.0.as_str()) }
/// # }
/// # impl std::error::Error for Failed {}
/// # impl Classify for Failed {
/// #     fn class(&self) -> FailureClass { self.0 }
/// #     fn is_rate_limited(&self) -> bool { false }
/// #     fn retry_after(&self) -> Option<Duration> { None }
/// #     fn source_reason(&self) -> SourceReason {
/// #         match self.0 { FailureClass::SourceDead => SourceReason::SourceDead, _ => SourceReason::NetworkError }
/// #     }
/// # }
/// # /// Echoes its request (one event per word when streaming); "hang", "fail", "reject" and "dead"
/// # /// never answer, fail transiently, are rejected, or find the source dead.
/// # struct Echo;
/// # #[async_trait::async_trait]
/// # impl Transport for Echo {
/// #     type Request = String;
/// #     type Response = String;
/// #     type Event = String;
/// #     type Error = Failed;
/// #     async fn send(&self, request: &String, events: Option<&EventSink<String>>) -> Result<String, Failed> {
/// #         match request.as_str() {
/// #             "hang" => std::future::pending().await,
/// #             "fail" => Err(Failed(FailureClass::Transient)),
/// #             "reject" => Err(Failed(FailureClass::RequestRejected)),
/// #             "dead" => Err(Failed(FailureClass::SourceDead)),
/// #             text => {
/// #                 if let Some(sink) = events {
/// #                     for word in text.split(' ') { let _ = sink.emit(word.to_string()).await; }
/// #                 }
/// #                 Ok(text.to_string())
/// #             }
/// #         }
/// #     }
/// #     fn tokens_used(_: &String) -> Option<u64> { None }
/// # }
/// # fn memory_governance() -> GovernanceFactory {
/// #     let governance = Governance {
/// #         gate: Arc::new(MemoryGate::default()),
/// #         breakers: Arc::new(MemoryBreakers::default()),
/// #         inline: true,
/// #         timeout: Duration::from_secs(1),
/// #     };
/// #     Arc::new(move || { let g = governance.clone(); Box::pin(async move { Ok(g) }) })
/// # }
/// # fn echo(name: &str) -> SourceSpec<Echo> {
/// #     SourceSpec { name: name.into(), transport: Arc::new(Echo), breaker: BreakerConfig::default(), limits: Limits::default(), est_tokens: 10 }
/// # }
/// # fn aimd() -> PacerFactory {
/// #     Arc::new(|limits: &Limits| Box::new(AimdPacer::new(limits.max_concurrency)) as Box<dyn Pacer>)
/// # }
/// # async fn start(config: ScopeConfig, sources: Vec<SourceSpec<Echo>>) -> (Runtime, Scope<Echo>) {
/// #     let runtime = Runtime::start(memory_governance(), RuntimeOptions::default()).await.unwrap();
/// #     let scope = runtime.add_scope(config, sources, Box::new(LeastInflight), aimd()).await.unwrap();
/// #     (runtime, scope)
/// # }
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
///     fn on_terminal(&self, _report: &TerminalReport<'_, Failed>) {}
/// }
///
/// let attempts = Attempts::default();
/// let governed = scope.call(&"hi".to_string(), &attempts, None, CallOptions::default()).await.unwrap();
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
    /// How it ended.
    pub result: AttemptResult<'a, T>,
    /// `true` if this attempt was a half-open probe.
    pub probe: bool,
}

/// A call that failed before any attempt reached the transport.
///
/// ```
/// # use std::sync::Arc;
/// # use std::time::Duration;
/// # use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
/// # use polygateway_actors::policy::pacer::{AimdPacer, Pacer};
/// # use polygateway_actors::policy::select::LeastInflight;
/// # use polygateway_actors::runtime::{
/// #     CallOptions, Governance, GovernanceFactory, NoObserver, PacerFactory, Runtime, RuntimeOptions,
/// #     Scope, ScopeConfig, SourceSpec,
/// # };
/// # use polygateway_actors::{BreakerConfig, Classify, EventSink, FailureClass, Limits, SourceReason, Transport};
/// # /// A transport error carrying its class.
/// # #[derive(Debug)]
/// # struct Failed(FailureClass);
/// # impl std::fmt::Display for Failed {
/// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, "{}", self.0.as_str()) }
/// # }
/// # impl std::error::Error for Failed {}
/// # impl Classify for Failed {
/// #     fn class(&self) -> FailureClass { self.0 }
/// #     fn is_rate_limited(&self) -> bool { false }
/// #     fn retry_after(&self) -> Option<Duration> { None }
/// #     fn source_reason(&self) -> SourceReason {
/// #         match self.0 { FailureClass::SourceDead => SourceReason::SourceDead, _ => SourceReason::NetworkError }
/// #     }
/// # }
/// # /// Echoes its request (one event per word when streaming); "hang", "fail", "reject" and "dead"
/// # /// never answer, fail transiently, are rejected, or find the source dead.
/// # struct Echo;
/// # #[async_trait::async_trait]
/// # impl Transport for Echo {
/// #     type Request = String;
/// #     type Response = String;
/// #     type Event = String;
/// #     type Error = Failed;
/// #     async fn send(&self, request: &String, events: Option<&EventSink<String>>) -> Result<String, Failed> {
/// #         match request.as_str() {
/// #             "hang" => std::future::pending().await,
/// #             "fail" => Err(Failed(FailureClass::Transient)),
/// #             "reject" => Err(Failed(FailureClass::RequestRejected)),
/// #             "dead" => Err(Failed(FailureClass::SourceDead)),
/// #             text => {
/// #                 if let Some(sink) = events {
/// #                     for word in text.split(' ') { let _ = sink.emit(word.to_string()).await; }
/// #                 }
/// #                 Ok(text.to_string())
/// #             }
/// #         }
/// #     }
/// #     fn tokens_used(_: &String) -> Option<u64> { None }
/// # }
/// # fn memory_governance() -> GovernanceFactory {
/// #     let governance = Governance {
/// #         gate: Arc::new(MemoryGate::default()),
/// #         breakers: Arc::new(MemoryBreakers::default()),
/// #         inline: true,
/// #         timeout: Duration::from_secs(1),
/// #     };
/// #     Arc::new(move || { let g = governance.clone(); Box::pin(async move { Ok(g) }) })
/// # }
/// # fn echo(name: &str) -> SourceSpec<Echo> {
/// #     SourceSpec { name: name.into(), transport: Arc::new(Echo), breaker: BreakerConfig::default(), limits: Limits::default(), est_tokens: 10 }
/// # }
/// # fn aimd() -> PacerFactory {
/// #     Arc::new(|limits: &Limits| Box::new(AimdPacer::new(limits.max_concurrency)) as Box<dyn Pacer>)
/// # }
/// # async fn start(config: ScopeConfig, sources: Vec<SourceSpec<Echo>>) -> (Runtime, Scope<Echo>) {
/// #     let runtime = Runtime::start(memory_governance(), RuntimeOptions::default()).await.unwrap();
/// #     let scope = runtime.add_scope(config, sources, Box::new(LeastInflight), aimd()).await.unwrap();
/// #     (runtime, scope)
/// # }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Mutex;
/// use polygateway_actors::runtime::{AttemptReport, CallObserver, TerminalReport};
///
/// #[derive(Default)]
/// struct Terminals(Mutex<Vec<String>>);
/// impl CallObserver<Echo> for Terminals {
///     fn on_attempt(&self, _report: &AttemptReport<'_, Echo>) {}
///     fn on_terminal(&self, r: &TerminalReport<'_, Failed>) {
///         self.0.lock().unwrap().push(format!("{} {}", r.scope, r.failure.kind()));
///     }
/// }
///
/// // A scope without sources fails every call before any attempt.
/// let (runtime, scope) = start(ScopeConfig::new("OCR"), vec![]).await;
/// let terminals = Terminals::default();
/// let failure = scope.call(&"page".to_string(), &terminals, None, CallOptions::default()).await.unwrap_err();
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
}

/// Receives attempt and terminal reports. Implemented by the embedding crate per call (it holds
/// the request's context: messages, tenant, meta…).
///
/// ```
/// # use std::sync::Arc;
/// # use std::time::Duration;
/// # use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
/// # use polygateway_actors::policy::pacer::{AimdPacer, Pacer};
/// # use polygateway_actors::policy::select::LeastInflight;
/// # use polygateway_actors::runtime::{
/// #     CallOptions, Governance, GovernanceFactory, NoObserver, PacerFactory, Runtime, RuntimeOptions,
/// #     Scope, ScopeConfig, SourceSpec,
/// # };
/// # use polygateway_actors::{BreakerConfig, Classify, EventSink, FailureClass, Limits, SourceReason, Transport};
/// # /// A transport error carrying its class.
/// # #[derive(Debug)]
/// # struct Failed(FailureClass);
/// # impl std::fmt::Display for Failed {
/// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, "{}", self.0.as_str()) }
/// # }
/// # impl std::error::Error for Failed {}
/// # impl Classify for Failed {
/// #     fn class(&self) -> FailureClass { self.0 }
/// #     fn is_rate_limited(&self) -> bool { false }
/// #     fn retry_after(&self) -> Option<Duration> { None }
/// #     fn source_reason(&self) -> SourceReason {
/// #         match self.0 { FailureClass::SourceDead => SourceReason::SourceDead, _ => SourceReason::NetworkError }
/// #     }
/// # }
/// # /// Echoes its request (one event per word when streaming); "hang", "fail", "reject" and "dead"
/// # /// never answer, fail transiently, are rejected, or find the source dead.
/// # struct Echo;
/// # #[async_trait::async_trait]
/// # impl Transport for Echo {
/// #     type Request = String;
/// #     type Response = String;
/// #     type Event = String;
/// #     type Error = Failed;
/// #     async fn send(&self, request: &String, events: Option<&EventSink<String>>) -> Result<String, Failed> {
/// #         match request.as_str() {
/// #             "hang" => std::future::pending().await,
/// #             "fail" => Err(Failed(FailureClass::Transient)),
/// #             "reject" => Err(Failed(FailureClass::RequestRejected)),
/// #             "dead" => Err(Failed(FailureClass::SourceDead)),
/// #             text => {
/// #                 if let Some(sink) = events {
/// #                     for word in text.split(' ') { let _ = sink.emit(word.to_string()).await; }
/// #                 }
/// #                 Ok(text.to_string())
/// #             }
/// #         }
/// #     }
/// #     fn tokens_used(_: &String) -> Option<u64> { None }
/// # }
/// # fn memory_governance() -> GovernanceFactory {
/// #     let governance = Governance {
/// #         gate: Arc::new(MemoryGate::default()),
/// #         breakers: Arc::new(MemoryBreakers::default()),
/// #         inline: true,
/// #         timeout: Duration::from_secs(1),
/// #     };
/// #     Arc::new(move || { let g = governance.clone(); Box::pin(async move { Ok(g) }) })
/// # }
/// # fn echo(name: &str) -> SourceSpec<Echo> {
/// #     SourceSpec { name: name.into(), transport: Arc::new(Echo), breaker: BreakerConfig::default(), limits: Limits::default(), est_tokens: 10 }
/// # }
/// # fn aimd() -> PacerFactory {
/// #     Arc::new(|limits: &Limits| Box::new(AimdPacer::new(limits.max_concurrency)) as Box<dyn Pacer>)
/// # }
/// # async fn start(config: ScopeConfig, sources: Vec<SourceSpec<Echo>>) -> (Runtime, Scope<Echo>) {
/// #     let runtime = Runtime::start(memory_governance(), RuntimeOptions::default()).await.unwrap();
/// #     let scope = runtime.add_scope(config, sources, Box::new(LeastInflight), aimd()).await.unwrap();
/// #     (runtime, scope)
/// # }
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
///     fn on_terminal(&self, _report: &TerminalReport<'_, Failed>) {
///         self.terminals.fetch_add(1, Ordering::Relaxed);
///     }
/// }
///
/// let counts = Counts::default();
/// let failure = scope.call(&"reject".to_string(), &counts, None, CallOptions::default()).await;
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
/// # use std::sync::Arc;
/// # use std::time::Duration;
/// # use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
/// # use polygateway_actors::policy::pacer::{AimdPacer, Pacer};
/// # use polygateway_actors::policy::select::LeastInflight;
/// # use polygateway_actors::runtime::{
/// #     CallOptions, Governance, GovernanceFactory, NoObserver, PacerFactory, Runtime, RuntimeOptions,
/// #     Scope, ScopeConfig, SourceSpec,
/// # };
/// # use polygateway_actors::{BreakerConfig, Classify, EventSink, FailureClass, Limits, SourceReason, Transport};
/// # /// A transport error carrying its class.
/// # #[derive(Debug)]
/// # struct Failed(FailureClass);
/// # impl std::fmt::Display for Failed {
/// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, "{}", self.0.as_str()) }
/// # }
/// # impl std::error::Error for Failed {}
/// # impl Classify for Failed {
/// #     fn class(&self) -> FailureClass { self.0 }
/// #     fn is_rate_limited(&self) -> bool { false }
/// #     fn retry_after(&self) -> Option<Duration> { None }
/// #     fn source_reason(&self) -> SourceReason {
/// #         match self.0 { FailureClass::SourceDead => SourceReason::SourceDead, _ => SourceReason::NetworkError }
/// #     }
/// # }
/// # /// Echoes its request (one event per word when streaming); "hang", "fail", "reject" and "dead"
/// # /// never answer, fail transiently, are rejected, or find the source dead.
/// # struct Echo;
/// # #[async_trait::async_trait]
/// # impl Transport for Echo {
/// #     type Request = String;
/// #     type Response = String;
/// #     type Event = String;
/// #     type Error = Failed;
/// #     async fn send(&self, request: &String, events: Option<&EventSink<String>>) -> Result<String, Failed> {
/// #         match request.as_str() {
/// #             "hang" => std::future::pending().await,
/// #             "fail" => Err(Failed(FailureClass::Transient)),
/// #             "reject" => Err(Failed(FailureClass::RequestRejected)),
/// #             "dead" => Err(Failed(FailureClass::SourceDead)),
/// #             text => {
/// #                 if let Some(sink) = events {
/// #                     for word in text.split(' ') { let _ = sink.emit(word.to_string()).await; }
/// #                 }
/// #                 Ok(text.to_string())
/// #             }
/// #         }
/// #     }
/// #     fn tokens_used(_: &String) -> Option<u64> { None }
/// # }
/// # fn memory_governance() -> GovernanceFactory {
/// #     let governance = Governance {
/// #         gate: Arc::new(MemoryGate::default()),
/// #         breakers: Arc::new(MemoryBreakers::default()),
/// #         inline: true,
/// #         timeout: Duration::from_secs(1),
/// #     };
/// #     Arc::new(move || { let g = governance.clone(); Box::pin(async move { Ok(g) }) })
/// # }
/// # fn echo(name: &str) -> SourceSpec<Echo> {
/// #     SourceSpec { name: name.into(), transport: Arc::new(Echo), breaker: BreakerConfig::default(), limits: Limits::default(), est_tokens: 10 }
/// # }
/// # fn aimd() -> PacerFactory {
/// #     Arc::new(|limits: &Limits| Box::new(AimdPacer::new(limits.max_concurrency)) as Box<dyn Pacer>)
/// # }
/// # async fn start(config: ScopeConfig, sources: Vec<SourceSpec<Echo>>) -> (Runtime, Scope<Echo>) {
/// #     let runtime = Runtime::start(memory_governance(), RuntimeOptions::default()).await.unwrap();
/// #     let scope = runtime.add_scope(config, sources, Box::new(LeastInflight), aimd()).await.unwrap();
/// #     (runtime, scope)
/// # }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
/// let governed = scope
///     .call(&"fire and forget".to_string(), &NoObserver, None, CallOptions::default())
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
