//! Test kit (feature `testkit`): a scripted in-process transport and a memory-backed runtime,
//! so tests and doc examples of this crate drive the real actors without any network.
//!
//! Not for production use; nothing in the runtime depends on it.

pub mod sim;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::memory::{MemoryBreakers, MemoryGate};
use crate::policy::pacer::{AimdPacer, Pacer};
use crate::policy::select::LeastInflight;
use crate::runtime::{
    Governance, GovernanceFactory, PacerFactory, Runtime, RuntimeOptions, Scope, ScopeConfig,
    SourceSpec,
};
use crate::{BreakerConfig, Classify, EventSink, FailureClass, Limits, SourceReason, Transport};

/// The error of [`Echo`]: a failure of the given class.
///
/// ```
/// use polygateway_actors::testkit::EchoError;
/// use polygateway_actors::{Classify, FailureClass, SourceReason};
/// let dead = EchoError(FailureClass::SourceDead);
/// assert_eq!(dead.class(), FailureClass::SourceDead);
/// assert_eq!(dead.source_reason(), SourceReason::SourceDead);
/// assert_eq!(EchoError(FailureClass::Transient).source_reason(), SourceReason::NetworkError);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoError(pub FailureClass);

impl std::fmt::Display for EchoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.as_str())
    }
}

impl std::error::Error for EchoError {}

impl Classify for EchoError {
    fn class(&self) -> FailureClass {
        self.0
    }
    fn is_rate_limited(&self) -> bool {
        false
    }
    fn retry_after(&self) -> Option<Duration> {
        None
    }
    fn source_reason(&self) -> SourceReason {
        match self.0 {
            FailureClass::SourceDead => SourceReason::SourceDead,
            _ => SourceReason::NetworkError,
        }
    }
}

/// A transport that answers its request text, streaming one event per word. Five requests are
/// scripted: `"hang"` never answers, `"slow"` answers after 100 ms (on tokio's clock, so at once
/// in a paused test), `"fail"` fails transiently, `"reject"` is rejected as a bad request,
/// `"dead"` finds the source dead.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway_actors::testkit::{Echo, EchoError};
/// use polygateway_actors::{FailureClass, Transport};
/// assert_eq!(Echo.send(&"hi there".to_string(), None).await.unwrap(), "hi there");
/// assert_eq!(Echo.send(&"fail".to_string(), None).await, Err(EchoError(FailureClass::Transient)));
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Echo;

#[async_trait]
impl Transport for Echo {
    type Request = String;
    type Response = String;
    type Event = String;
    type Error = EchoError;

    async fn send(
        &self,
        request: &String,
        events: Option<&EventSink<String>>,
    ) -> Result<String, EchoError> {
        match request.as_str() {
            "hang" => std::future::pending().await,
            "slow" => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                Ok(request.clone())
            }
            "fail" => Err(EchoError(FailureClass::Transient)),
            "reject" => Err(EchoError(FailureClass::RequestRejected)),
            "dead" => Err(EchoError(FailureClass::SourceDead)),
            text => {
                if let Some(sink) = events {
                    for word in text.split(' ') {
                        // A consumer that went away ends the stream; the answer still returns.
                        let _ = sink.emit(word.to_string()).await;
                    }
                }
                Ok(text.to_string())
            }
        }
    }

    fn tokens_used(_: &String) -> Option<u64> {
        None
    }
}

/// Governance over the in-memory limiter and breakers, 1 s backend timeout.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway_actors::runtime::{Runtime, RuntimeOptions};
/// use polygateway_actors::testkit::memory_governance;
/// let runtime = Runtime::start(memory_governance(), RuntimeOptions::default()).await.unwrap();
/// assert!(!runtime.is_shut_down());
/// runtime.shutdown(std::time::Duration::from_secs(1)).await;
/// # }
/// ```
pub fn memory_governance() -> GovernanceFactory {
    let governance = Governance {
        gate: Arc::new(MemoryGate::default()),
        breakers: Arc::new(MemoryBreakers::default()),
        attempts: None,
        timeout: Duration::from_secs(1),
    };
    Arc::new(move || {
        let governance = governance.clone();
        Box::pin(async move { Ok(governance) })
    })
}

/// An [`Echo`] source named `name`: default breaker, no limits, 10 estimated tokens.
///
/// ```
/// let spec = polygateway_actors::testkit::echo("echo_1");
/// assert_eq!(&*spec.name, "echo_1");
/// assert_eq!(spec.limits.max_concurrency, 0);
/// ```
pub fn echo(name: &str) -> SourceSpec<Echo> {
    SourceSpec {
        name: name.into(),
        transport: Arc::new(Echo),
        breaker: BreakerConfig::default(),
        limits: Limits::default(),
        est_tokens: 10,
    }
}

/// The original library's pacer for every source: [`AimdPacer`] sized by the source's concurrency limit
/// (it starts at 8 and may grow to the larger of 64 and that limit).
///
/// ```
/// use polygateway_actors::policy::pacer::PacerObservation;
/// use polygateway_actors::{AttemptVerdict, Limits};
/// let make = polygateway_actors::testkit::aimd();
/// let mut pacer = make(&Limits { max_concurrency: 100, ..Limits::default() });
/// assert_eq!(pacer.limit(), 8);
/// pacer.observe(&PacerObservation::new(AttemptVerdict::RateLimited, std::time::Instant::now()));
/// assert_eq!(pacer.limit(), 4);
/// ```
pub fn aimd() -> PacerFactory {
    Arc::new(|limits: &Limits| Box::new(AimdPacer::new(limits.max_concurrency)) as Box<dyn Pacer>)
}

/// A runtime on [`memory_governance`] with one scope over `sources` (least-in-flight selection,
/// [`aimd`] pacers).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway_actors::runtime::{GovernOptions, NoObserver, ScopeConfig};
/// use polygateway_actors::testkit::{echo, start};
/// let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
/// let answer = scope.call(&"hello".to_string(), &NoObserver, None, GovernOptions::default()).await;
/// assert_eq!(answer.unwrap().response, "hello");
/// runtime.shutdown(std::time::Duration::from_secs(1)).await;
/// # }
/// ```
pub async fn start(config: ScopeConfig, sources: Vec<SourceSpec<Echo>>) -> (Runtime, Scope<Echo>) {
    let runtime = Runtime::start(memory_governance(), RuntimeOptions::default())
        .await
        .expect("a memory-backed runtime starts");
    let scope = runtime
        .add_scope(config, sources, Box::new(LeastInflight), aimd())
        .await
        .expect("the echo scope starts");
    (runtime, scope)
}
