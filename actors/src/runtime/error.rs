//! [`RuntimeError`]: why the runtime could not do what was asked of it.

use std::time::Duration;

/// Why the runtime could not start something, reach one of its actors, or finish in time. Each
/// variant is a state the caller may act on (a shut-down runtime never comes back; an actor that
/// is starting or restarting will; one given up on past its restart intensity will not), and its
/// text names the actor and the cause.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # use std::time::Duration;
/// use polygateway_actors::runtime::RuntimeError;
/// # use polygateway_actors::runtime::ScopeConfig;
/// # use polygateway_actors::testkit::{echo, start};
/// let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
/// assert_eq!(scope.router_status(), Ok(()));
/// runtime.shutdown(Duration::from_secs(1)).await;
/// let down = scope.router_status().unwrap_err();
/// assert_eq!(down, RuntimeError::ShutDown);
/// assert_eq!(down.to_string(), "runtime shut down");
/// let starting = RuntimeError::Starting { actor: "telemetry writer".into() };
/// assert_eq!(starting.to_string(), "telemetry writer starting");
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The runtime has shut down: its actors are stopped and nothing new starts.
    #[error("runtime shut down")]
    ShutDown,
    /// The actor has not started yet.
    #[error("{actor} starting")]
    Starting {
        /// Which actor.
        actor: String,
    },
    /// The actor failed and its supervisor restarts it after a backoff.
    #[error("{actor} is restarting after: {cause}")]
    Restarting {
        /// Which actor.
        actor: String,
        /// Its failure.
        cause: String,
    },
    /// The actor stopped for good: past its restart intensity, or not restartable.
    #[error("{actor} stopped: {cause}")]
    Stopped {
        /// Which actor.
        actor: String,
        /// Its last failure.
        cause: String,
    },
    /// The actor could not be spawned.
    #[error("{actor} could not start: {cause}")]
    NotStarted {
        /// Which actor.
        actor: String,
        /// What the spawn answered.
        cause: String,
    },
    /// A bounded wait ran out (a telemetry flush slower than its bound).
    #[error("not done within {0:?}")]
    TimedOut(Duration),
}
