//! What a governed call answers: its result ([`Governed`]), its failure ([`CallFailure`]) and
//! its options ([`GovernOptions`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::machine::reason::ScopeReason;
use crate::outcome::SourceReason;
use crate::policy::wait_queue::Priority;

/// How a governed call failed.
///
/// Scope-level failures carry the reason of every source that was tried:
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::runtime::{CallFailure, ScopeReason};
/// use polygateway_actors::SourceReason;
/// let failure = CallFailure::<std::io::Error>::Unavailable {
///     reason: ScopeReason::RetryExhausted,
///     retry_after: Duration::ZERO,
///     per_source: [("openai_1".into(), SourceReason::Timeout)].into_iter().collect(),
///     last_error: Some(std::io::Error::other("deadline")),
///     detail: "3 attempt(s) failed".into(),
/// };
/// if let CallFailure::Unavailable { per_source, last_error, .. } = &failure {
///     assert_eq!(per_source["openai_1"], SourceReason::Timeout);
///     assert_eq!(last_error.as_ref().unwrap().to_string(), "deadline");
/// }
/// ```
#[derive(Debug)]
pub enum CallFailure<E> {
    /// The scope cannot serve now.
    Unavailable {
        /// Scope-level reason.
        reason: ScopeReason,
        /// When trying again makes sense (0 = now).
        retry_after: Duration,
        /// Why each source could not serve.
        per_source: BTreeMap<Arc<str>, SourceReason>,
        /// The last attempt error, if any attempt was made.
        last_error: Option<E>,
        /// Human detail (e.g. the backend's error).
        detail: String,
    },
    /// The request was rejected (no retry, no switch).
    Rejected(E),
    /// The answer was unusable.
    Invalid(E),
    /// A streaming attempt failed after deltas reached the consumer: it cannot be retried.
    StreamBroken {
        /// The failure.
        error: E,
        /// Deltas delivered before it.
        delivered: u64,
    },
    /// The runtime or the scope's actors are gone.
    Shutdown(String),
}

impl<E> CallFailure<E> {
    /// A short name of the failure for spans and metrics (`circuit_open`, `rejected`, …).
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_actors::runtime::{CallFailure, ScopeReason};
    /// let rejected = CallFailure::Rejected(std::io::Error::other("400 bad request"));
    /// assert_eq!(rejected.kind(), "rejected");
    /// // Scope-level failures are named by their reason.
    /// let open = CallFailure::<std::io::Error>::Unavailable {
    ///     reason: ScopeReason::CircuitOpen,
    ///     retry_after: Duration::from_secs(30),
    ///     per_source: Default::default(),
    ///     last_error: None,
    ///     detail: String::new(),
    /// };
    /// assert_eq!(open.kind(), "circuit_open");
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            CallFailure::Unavailable { reason, .. } => reason.as_str(),
            CallFailure::Rejected(_) => "rejected",
            CallFailure::Invalid(_) => "invalid",
            CallFailure::StreamBroken { .. } => "stream_broken",
            CallFailure::Shutdown(_) => "shutdown",
        }
    }
}

/// A successful governed call.
///
/// ```
/// # use std::time::Duration;
/// # use polygateway_actors::runtime::{GovernOptions, NoObserver, ScopeConfig};
/// # use polygateway_actors::testkit::{echo, start};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let (runtime, scope) = start(ScopeConfig::new("LLM"), vec![echo("echo_1")]).await;
/// use polygateway_actors::runtime::Governed;
/// let Governed { response, source, attempts, attempt_id, capacity_wait, continued_from } = scope
///     .call(&"hello".to_string(), &NoObserver, None, GovernOptions::default())
///     .await
///     .unwrap();
/// assert_eq!(response, "hello");
/// assert_eq!(&*source, "echo_1");
/// assert_eq!(attempts, 1);
/// assert!(!attempt_id.is_empty());
/// // An idle scope had capacity at once.
/// assert_eq!(capacity_wait, Duration::ZERO);
/// // Not a continuation of a cut stream (docs/behaviour.md §5.10).
/// assert!(continued_from.is_none());
/// # runtime.shutdown(Duration::from_secs(1)).await;
/// # }
/// ```
#[derive(Debug)]
pub struct Governed<R> {
    /// The transport's answer.
    pub response: R,
    /// Id of the attempt that produced it.
    pub attempt_id: String,
    /// Source that answered.
    pub source: Arc<str>,
    /// Attempts made (all, including 429 pushbacks).
    pub attempts: u32,
    /// Time the call waited for capacity before its attempts were sent: a pacer slot, a quota
    /// gate, sources cooling down, a 429 pushback. The back-off before retrying a transient
    /// failure is not counted (it is the retry's, not a wait for capacity).
    pub capacity_wait: Duration,
    /// The source whose stream was cut after content when `source` continued it
    /// (docs/behaviour.md §5.10): the answer is the cut text and its continuation, spliced.
    pub continued_from: Option<Arc<str>>,
}

/// Options of one governed call: what the runtime needs of a call besides its request. (The
/// root crate's `CallOptions` is what a caller sets; it is turned into these where it enters
/// the govern layer.)
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::policy::wait_queue::Priority;
/// use polygateway_actors::runtime::GovernOptions;
/// // An ordinary call feeds its verdict to the breaker …
/// assert!(!GovernOptions::default().breaker_exempt);
/// // … a re-ask after unusable structured output does not.
/// let reask = GovernOptions { breaker_exempt: true, ..GovernOptions::default() };
/// assert!(reask.breaker_exempt);
/// // An interactive call of tenant "acme" (weight 2) that must be answered within 5 s.
/// let urgent = GovernOptions {
///     priority: Priority::Interactive,
///     deadline: Some(Duration::from_secs(5)),
///     tenant: Some("acme".into()),
///     weight: 2,
///     ..GovernOptions::default()
/// };
/// assert_eq!(GovernOptions::default().weight, 1);
/// # let _ = urgent;
/// ```
#[derive(Debug, Clone)]
pub struct GovernOptions {
    /// A structured-output re-ask: its verdict never counts toward the breaker (docs/behaviour.md §9.2).
    pub breaker_exempt: bool,
    /// The call's class in the scope's waiting room (docs/behaviour.md §5.7).
    pub priority: Priority,
    /// How long the call may take from when it starts: past it the call ends
    /// [`ScopeReason::DeadlineExceeded`] and nothing more is sent.
    pub deadline: Option<Duration>,
    /// The fair-share key among waiting calls of one class (`None`: the unattributed share).
    pub tenant: Option<Arc<str>>,
    /// The tenant's turns per round while tenants wait (0 counts as 1).
    pub weight: u32,
}

impl Default for GovernOptions {
    fn default() -> Self {
        Self {
            breaker_exempt: false,
            priority: Priority::Normal,
            deadline: None,
            tenant: None,
            weight: 1,
        }
    }
}
