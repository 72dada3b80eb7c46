//! What a runtime is given to govern with: the backends ([`Governance`]) and how to build them
//! again after a restart ([`GovernanceFactory`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::ports::attempt::AttemptBackend;
use crate::ports::breaker::BreakerBackend;
use crate::ports::gate::GateBackend;
use crate::ports::BackendError;

/// The governance backends of a runtime.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
/// use polygateway_actors::runtime::Governance;
/// // Single-process governance: in-memory limiter and breakers (answered without I/O, in the
/// // caller's task).
/// let governance = Governance {
///     gate: Arc::new(MemoryGate::default()),
///     breakers: Arc::new(MemoryBreakers::default()),
///     attempts: None, // composed from the two above
///     timeout: Duration::from_secs(3),
/// };
/// // Clones share the same backends (and so the same counters and breaker states).
/// let shared = governance.clone();
/// assert!(Arc::ptr_eq(&shared.gate, &governance.gate));
/// ```
#[derive(Debug, Clone)]
pub struct Governance {
    /// The six-gate limiter.
    pub gate: Arc<dyn GateBackend>,
    /// The breakers.
    pub breakers: Arc<dyn BreakerBackend>,
    /// Admission and finish of one attempt, when the store answers each in one call (Redis with
    /// both backends on one server). `None`: composed from `gate` and `breakers`
    /// ([`ComposedAttempts`](crate::ports::attempt::ComposedAttempts), one call per step).
    pub attempts: Option<Arc<dyn AttemptBackend>>,
    /// Bound of every backend call.
    pub timeout: Duration,
}

/// Builds (or rebuilds after a restart) the governance backends.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Arc;
/// use polygateway_actors::runtime::{GovernanceFactory, Runtime, RuntimeError, RuntimeOptions};
/// use polygateway_actors::BackendError;
/// // A factory whose backend cannot be reached: the runtime refuses to start (fail closed).
/// let unreachable: GovernanceFactory =
///     Arc::new(|| Box::pin(async { Err(BackendError::new("redis: connection refused")) }));
/// let error = Runtime::start(unreachable, RuntimeOptions::default()).await.unwrap_err();
/// assert!(matches!(&error, RuntimeError::NotStarted { actor, .. } if actor == "admission"), "{error:?}");
/// assert!(error.to_string().contains("connection refused"));
/// # }
/// ```
pub type GovernanceFactory = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Governance, BackendError>> + Send>>
        + Send
        + Sync,
>;
