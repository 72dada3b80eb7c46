//! Errors (docs/behaviour.md §6): what reaches the caller, and what a transport attempt fails with.
//!
//! Callers see [`GatewayError`]. Transient and source-dead attempt failures ([`TransportError`])
//! are absorbed by the retry loop and surface as [`GatewayError::Unavailable`] with
//! `reason = retry_exhausted` once the budget is spent.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use polygateway_actors::{Classify, FailureClass, SourceReason};

pub(crate) use crate::summary::summarize_body;

/// Scope-level reason of an unavailable error.
///
/// A job queue can use it to decide how to reschedule:
///
/// ```
/// use polygateway::UnavailableReason;
/// // No sources means an assembly defect: retrying later will not help.
/// fn worth_requeueing(reason: UnavailableReason) -> bool {
///     !matches!(reason, UnavailableReason::NoSources)
/// }
/// assert!(worth_requeueing(UnavailableReason::CircuitOpen));
/// assert!(!worth_requeueing(UnavailableReason::NoSources));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UnavailableReason {
    /// Every breaker refused.
    CircuitOpen,
    /// The attempt budget is spent.
    RetryExhausted,
    /// The stall guard fired (waited too long while the scope made no progress).
    Stalled,
    /// A quota gate is full and `QUOTA_FULL=fail_fast`.
    QuotaExhausted,
    /// The scope has no sources.
    NoSources,
    /// The limiter or breaker backend is down (fail-closed).
    GovernanceBackendDown,
    /// The call's deadline passed before it could be served; nothing was sent after it.
    DeadlineExceeded,
    /// A spend budget of the scope, the tenant or the virtual key has no room for the call in
    /// its current window (`Unavailable::budget` says which, and when it resets).
    BudgetExhausted,
}

impl UnavailableReason {
    /// Wire name.
    ///
    /// ```
    /// use polygateway::UnavailableReason;
    /// assert_eq!(UnavailableReason::RetryExhausted.as_str(), "retry_exhausted");
    /// assert_eq!(UnavailableReason::GovernanceBackendDown.as_str(), "governance_backend_down");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CircuitOpen => "circuit_open",
            Self::RetryExhausted => "retry_exhausted",
            Self::Stalled => "stalled",
            Self::QuotaExhausted => "quota_exhausted",
            Self::NoSources => "no_sources",
            Self::GovernanceBackendDown => "governance_backend_down",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::BudgetExhausted => "budget_exhausted",
        }
    }
}

/// Which member of the unavailable family.
///
/// ```
/// use polygateway::UnavailableKind;
/// // A governance backend outage is an operations problem; the others are upstream weather.
/// fn page_on_call(kind: UnavailableKind) -> bool {
///     matches!(kind, UnavailableKind::GovernanceBackend)
/// }
/// assert!(page_on_call(UnavailableKind::GovernanceBackend));
/// assert!(!page_on_call(UnavailableKind::AllSourcesExhausted));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UnavailableKind {
    /// `CircuitOpenError`.
    CircuitOpen,
    /// `AllSourcesExhausted`.
    AllSourcesExhausted,
    /// `GovernanceBackendError`.
    GovernanceBackend,
}

impl UnavailableKind {
    /// Class name as used in telemetry's `error` column.
    ///
    /// ```
    /// use polygateway::UnavailableKind;
    /// assert_eq!(UnavailableKind::CircuitOpen.class_name(), "CircuitOpenError");
    /// assert_eq!(UnavailableKind::GovernanceBackend.class_name(), "GovernanceBackendError");
    /// ```
    pub fn class_name(self) -> &'static str {
        match self {
            Self::CircuitOpen => "CircuitOpenError",
            Self::AllSourcesExhausted => "AllSourcesExhausted",
            Self::GovernanceBackend => "GovernanceBackendError",
        }
    }
}

/// A scope could not serve the call now. Carries enough for a job queue to reschedule.
///
/// Here the only source answers 503 to every attempt, so the retry budget runs out:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway::ports::SourceReason;
/// use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
/// use polygateway::{Message, UnavailableKind, UnavailableReason};
/// let mock = MockUpstream::start(Behaviour::ServerError(503)).await;
/// let extra = [("LLM__RETRY__MAX_ATTEMPTS", "2")];
/// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &extra);
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
/// let err = gw.chat(vec![Message::user("hi")]).await.unwrap_err();
/// let u = err.unavailable().expect("a scope-level failure");
/// assert_eq!((u.kind, u.reason), (UnavailableKind::AllSourcesExhausted, UnavailableReason::RetryExhausted));
/// assert_eq!(u.scope, "LLM");
/// // The source answered 503: a server error, not a network one.
/// assert_eq!(u.per_source_reasons["openai_1"], SourceReason::ServerError);
/// assert!(u.retry_after_s >= 0.0);
/// assert!(u.to_string().starts_with("scope LLM unavailable (retry_exhausted)"));
/// # gw.shutdown().await;
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Unavailable {
    /// Family member.
    pub kind: UnavailableKind,
    /// Scope name.
    pub scope: String,
    /// Scope-level reason.
    pub reason: UnavailableReason,
    /// Seconds until trying again makes sense (0 = now); never absent.
    pub retry_after_s: f64,
    /// Why each source could not serve.
    pub per_source_reasons: BTreeMap<String, SourceReason>,
    /// Human detail (what ended the call, then `last error: …`), free of secrets.
    pub detail: String,
    /// The budget that refused, when `reason` is `budget_exhausted`.
    pub budget: Option<crate::types::BudgetStatus>,
}

impl Unavailable {
    /// The value of an HTTP `Retry-After` header answering this unavailability: `retry_after_s`
    /// in whole seconds, rounded up, and never 0 — `Retry-After: 0` invites a client to retry
    /// at once, in a hot loop, against a scope that just said it cannot serve. The rule
    /// `polygateway serve` applies to its 429 and 503 answers.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
    /// use polygateway::Message;
    /// let mock = MockUpstream::start(Behaviour::ServerError(503)).await;
    /// let extra = [("LLM__RETRY__MAX_ATTEMPTS", "1")];
    /// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &extra);
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
    /// let err = gw.chat(vec![Message::user("hi")]).await.unwrap_err();
    /// let u = err.unavailable().unwrap();
    /// assert!(u.retry_after_header() >= 1);
    /// assert!(u.retry_after_header() as f64 >= u.retry_after_s);
    /// # gw.shutdown().await;
    /// # }
    /// ```
    pub fn retry_after_header(&self) -> u64 {
        retry_after_header_secs(self.retry_after_s)
    }
}

/// Whole seconds for a `Retry-After` header from a hint in seconds: rounded up, at least 1.
pub(crate) fn retry_after_header_secs(seconds: f64) -> u64 {
    // `as` saturates: NaN becomes 0 (then 1), an absurd hint the largest header value.
    (seconds.max(0.0).ceil() as u64).max(1)
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "scope {} unavailable ({}): retry after {:.1}s",
            self.scope,
            self.reason.as_str(),
            self.retry_after_s
        )?;
        if !self.per_source_reasons.is_empty() {
            let reasons: Vec<String> = self
                .per_source_reasons
                .iter()
                .map(|(s, r)| format!("{s}={}", r.as_str()))
                .collect();
            write!(f, "; sources: {}", reasons.join(", "))?;
        }
        if !self.detail.is_empty() {
            write!(f, "; {}", self.detail)?;
        }
        Ok(())
    }
}

/// An attempt failure, classified by the transport that saw it.
///
/// Governance reads it through [`Classify`]; a 429 with a
/// `Retry-After` looks like this:
///
/// ```
/// use std::time::Duration;
/// use polygateway::ports::{Classify, FailureClass, SourceReason};
/// use polygateway::TransportError;
/// let mut e = TransportError::transient(SourceReason::RateLimited, "429 Too Many Requests");
/// e.rate_limited = true;
/// e.status = Some(429);
/// e.retry_after = Some(Duration::from_secs(2));
/// assert_eq!(e.class(), FailureClass::Transient);
/// assert!(e.is_rate_limited());
/// assert_eq!(Classify::retry_after(&e), Some(Duration::from_secs(2)));
/// assert_eq!(e.to_string(), "429 Too Many Requests");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TransportError {
    /// The class (drives retry, switching, breaker).
    pub class: FailureClass,
    /// Per-source reason (for `per_source_reasons`).
    pub reason: SourceReason,
    /// `true` for a 429 that is pushback.
    pub rate_limited: bool,
    /// Retry-After hint (seconds form).
    pub retry_after: Option<Duration>,
    /// Rate-limit headers of a 429 (read by the pacer).
    pub rate_limit: Option<polygateway_actors::policy::pacer::RateLimitHint>,
    /// HTTP status, when there was one.
    pub status: Option<u16>,
    /// Body summary (docs/behaviour.md §6), empty when there was no body.
    pub body_text: String,
    /// What happened, free of secrets. Includes the body summary when there is one.
    pub message: String,
    /// `true` when the service answered (any real HTTP response): the breaker records success
    /// for non-transient classes.
    pub answered: bool,
    /// A streamed answer cut after content (docs/behaviour.md §5.10): what had been assembled
    /// and delivered when it was cut, for a continuation on another source to carry on.
    pub(crate) cut: Option<Box<crate::types::LlmResponse>>,
}

impl TransportError {
    /// A transport error of `class` with a message.
    ///
    /// ```
    /// use polygateway::ports::{Classify, FailureClass, SourceReason};
    /// use polygateway::TransportError;
    /// let e = TransportError::new(FailureClass::SourceDead, SourceReason::SourceDead, "401 invalid key");
    /// assert_eq!(e.source_reason(), SourceReason::SourceDead);
    /// assert_eq!((e.status, e.rate_limited, e.answered), (None, false, false));
    /// ```
    pub fn new(class: FailureClass, reason: SourceReason, message: impl Into<String>) -> Self {
        Self {
            class,
            reason,
            rate_limited: false,
            retry_after: None,
            rate_limit: None,
            status: None,
            body_text: String::new(),
            message: message.into(),
            answered: false,
            cut: None,
        }
    }

    /// A transient failure (network error unless `reason` says otherwise).
    ///
    /// ```
    /// use polygateway::ports::{Classify, FailureClass, SourceReason};
    /// use polygateway::TransportError;
    /// let e = TransportError::transient(SourceReason::Timeout, "no first token within 10 s");
    /// assert_eq!(e.class(), FailureClass::Transient);
    /// assert_eq!(e.reason, SourceReason::Timeout);
    /// assert!(!e.proves_alive());
    /// ```
    pub fn transient(reason: SourceReason, message: impl Into<String>) -> Self {
        Self::new(FailureClass::Transient, reason, message)
    }

    /// A local or upstream rejection of the request (no retry, no switch).
    pub(crate) fn rejected(message: impl Into<String>) -> Self {
        Self::new(
            FailureClass::RequestRejected,
            SourceReason::NetworkError,
            message,
        )
    }

    /// The result arrived but is unusable; the service answered.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        let mut e = Self::new(
            FailureClass::ResultInvalid,
            SourceReason::NetworkError,
            message,
        );
        e.answered = true;
        e
    }

    /// A 2xx body of another shape than `what`'s: a malformed answer of the source (transient:
    /// another attempt or source may answer well), its summary kept.
    pub(crate) fn malformed_body(what: &str, e: &serde_json::Error, body: &[u8]) -> Self {
        let summary = summarize_body(&String::from_utf8_lossy(body));
        let mut err = Self::transient(
            SourceReason::NetworkError,
            format!("malformed {what} body ({e}): {summary}"),
        );
        err.body_text = summary;
        err
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TransportError {}

impl Classify for TransportError {
    fn class(&self) -> FailureClass {
        self.class
    }
    fn is_rate_limited(&self) -> bool {
        self.rate_limited
    }
    fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
    fn rate_limit_hint(&self) -> Option<polygateway_actors::policy::pacer::RateLimitHint> {
        self.rate_limit
    }
    fn proves_alive(&self) -> bool {
        self.answered
            && matches!(
                self.class,
                FailureClass::RequestRejected | FailureClass::ResultInvalid
            )
    }
    fn source_reason(&self) -> SourceReason {
        self.reason
    }
}

/// Structured-output failure details (docs/behaviour.md §9.2 step 5).
///
/// ```
/// use polygateway::error::InvalidResult;
/// use polygateway::GatewayError;
/// let details = InvalidResult {
///     raw_text: "{\"name\": 42".into(),
///     repair_error: Some("unterminated object".into()),
///     validation_errors: vec![],
/// };
/// let err = GatewayError::ResultInvalid { message: "no valid JSON".into(), details: Box::new(details) };
/// if let GatewayError::ResultInvalid { details, .. } = &err {
///     assert_eq!(details.repair_error.as_deref(), Some("unterminated object"));
/// }
/// assert_eq!(err.to_string(), "ResultInvalid: no valid JSON");
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InvalidResult {
    /// The raw text of the last answer.
    pub raw_text: String,
    /// Why repair failed, if it did.
    pub repair_error: Option<String>,
    /// Validation errors (first few).
    pub validation_errors: Vec<String>,
}

/// Everything a call can fail with.
///
/// ```
/// use polygateway::GatewayError;
/// /// A job queue's rule: requeue scope-level unavailability after its hint, fail the rest.
/// fn requeue_after(e: &GatewayError) -> Option<f64> {
///     e.unavailable().map(|u| u.retry_after_s)
/// }
/// use polygateway::config::ConfigError;
/// let bad_config = GatewayError::Config(ConfigError::Missing {
///     key: "LLM__QWEN__1__MODEL".into(),
///     reason: "every source names its model".into(),
/// });
/// assert_eq!(
///     bad_config.to_string(),
///     "Config: missing required key LLM__QWEN__1__MODEL: every source names its model"
/// );
/// assert_eq!(requeue_after(&bad_config), None);
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum GatewayError {
    /// The scope cannot serve now (`CircuitOpen`, `AllSourcesExhausted`, `GovernanceBackend`).
    #[error("{kind}: {0}", kind = .0.kind.class_name())]
    Unavailable(Box<Unavailable>),
    /// The request was rejected (locally before sending, or by the upstream with 400).
    #[error("RequestRejected: {message}")]
    RequestRejected {
        /// What was wrong.
        message: String,
        /// Upstream body summary, if any.
        body_text: String,
    },
    /// The answer was unusable (structured output exhausted, wrong dim, bad ZIP…).
    #[error("ResultInvalid: {message}")]
    ResultInvalid {
        /// What was wrong.
        message: String,
        /// Details for structured output.
        details: Box<InvalidResult>,
    },
    /// A typed structured call ([`ChatHandle::chat_structured`](crate::ChatHandle::chat_structured))
    /// was answered with tool calls or a refusal: a valid answer, but no value of the asked type
    /// exists. The answer is carried whole; `chat_with` and `chat_structured_schema` return such
    /// answers as responses instead.
    #[error("NoStructuredValue: {}", no_value_reason(.0))]
    NoStructuredValue(Box<crate::types::LlmResponse>),
    /// The caller named a scope or source that is not configured (assembly defect).
    #[error("SourceNotConfigured: {0}")]
    SourceNotConfigured(String),
    /// Entry validation failed before anything was sent (docs/behaviour.md §2.2).
    #[error("InvalidInput: {0}")]
    InvalidInput(#[from] crate::validate::ValidationError),
    /// A stream failed after deltas were delivered to the consumer; it cannot be retried
    /// transparently (an extension beyond docs/behaviour.md §6, for `chat_stream`).
    #[error("StreamInterrupted: {message} (after {delivered} delivered deltas)")]
    StreamInterrupted {
        /// What failed.
        message: String,
        /// Deltas the consumer had already received.
        delivered: u64,
    },
    /// The configuration is invalid (names the key and what is allowed).
    #[error("Config: {0}")]
    Config(#[from] crate::config::ConfigError),
    /// The runtime was shut down or its scope actor is gone.
    #[error("Shutdown: {0}")]
    Shutdown(String),
}

/// The runtime could not start an actor or reach one: the gateway cannot serve (its text names
/// the actor and why).
impl From<polygateway_actors::runtime::RuntimeError> for GatewayError {
    fn from(e: polygateway_actors::runtime::RuntimeError) -> Self {
        GatewayError::Shutdown(e.to_string())
    }
}

impl GatewayError {
    /// The unavailable details, if this is a scope-level unavailability.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
    /// use polygateway::Message;
    /// let mock = MockUpstream::start(Behaviour::ServerError(502)).await;
    /// let extra = [("LLM__RETRY__MAX_ATTEMPTS", "1")];
    /// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &extra);
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
    /// let err = gw.chat(vec![Message::user("hi")]).await.unwrap_err();
    /// let retry_after_s = err.unavailable().map(|u| u.retry_after_s);
    /// assert!(retry_after_s.is_some());
    /// # use polygateway::config::ConfigError;
    /// let bad_key = ConfigError::Assembly("bad key".into());
    /// assert!(polygateway::GatewayError::Config(bad_key).unavailable().is_none());
    /// # gw.shutdown().await;
    /// # }
    /// ```
    pub fn unavailable(&self) -> Option<&Unavailable> {
        match self {
            GatewayError::Unavailable(u) => Some(u),
            _ => None,
        }
    }

    /// `true` for the scope-level unavailable family (reschedule later).
    ///
    /// Everything else is final for this request:
    ///
    /// ```
    /// use polygateway::validate::ValidationError;
    /// use polygateway::GatewayError;
    /// let bad_input: GatewayError = ValidationError::TenantIdEmpty.into();
    /// assert!(!bad_input.is_unavailable());
    /// let rejected = GatewayError::RequestRejected { message: "400".into(), body_text: String::new() };
    /// assert!(!rejected.is_unavailable());
    /// ```
    pub fn is_unavailable(&self) -> bool {
        self.unavailable().is_some()
    }

    /// The class name used in telemetry's `error` column.
    ///
    /// ```
    /// use polygateway::GatewayError;
    /// let e = GatewayError::SourceNotConfigured("EMBEDDINGS".into());
    /// assert_eq!(e.class_name(), "SourceNotConfigured");
    /// // The `Display` form starts with the same name.
    /// assert!(e.to_string().starts_with(e.class_name()));
    /// ```
    pub fn class_name(&self) -> &'static str {
        match self {
            GatewayError::Unavailable(u) => u.kind.class_name(),
            GatewayError::RequestRejected { .. } => "RequestRejected",
            GatewayError::ResultInvalid { .. } => "ResultInvalid",
            GatewayError::NoStructuredValue(_) => "NoStructuredValue",
            GatewayError::SourceNotConfigured(_) => "SourceNotConfigured",
            GatewayError::InvalidInput(_) => "InvalidInput",
            GatewayError::StreamInterrupted { .. } => "StreamInterrupted",
            GatewayError::Config(_) => "Config",
            GatewayError::Shutdown(_) => "Shutdown",
        }
    }
}

/// What a [`GatewayError::NoStructuredValue`] answer held instead of a value.
fn no_value_reason(answer: &crate::types::LlmResponse) -> String {
    let calls = answer.tool_calls.len() + usize::from(answer.function_call.is_some());
    if calls > 0 {
        format!(
            "the model answered with {calls} tool call(s) instead of a structured value \
             (the answer is in the error; chat_with or chat_structured_schema return it as a response)"
        )
    } else {
        "the model refused instead of answering with a structured value (the refusal is in the answer)"
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::retry_after_header_secs;

    #[test]
    fn retry_after_headers_round_up_and_are_never_zero() {
        let cases = [
            (0.0, 1),
            (0.2, 1),
            (1.0, 1),
            (2.2, 3),
            (29.7, 30),
            (-3.0, 1),
            (f64::NAN, 1),
        ];
        for (hint, header) in cases {
            assert_eq!(retry_after_header_secs(hint), header, "hint {hint}");
        }
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn transport_error_rejected_example() {
        use crate::ports::{Classify, FailureClass};
        use crate::TransportError;
        let e = TransportError::rejected("image is neither PNG nor JPEG");
        assert_eq!(e.class(), FailureClass::RequestRejected);
        // Built locally: nothing was sent, so it says nothing about the source's health.
        assert!(!e.answered && !e.proves_alive());
    }

    #[test]
    fn transport_error_invalid_example() {
        use crate::ports::{Classify, FailureClass};
        use crate::TransportError;
        let e = TransportError::invalid("expected 3 vectors, got 2");
        assert_eq!(e.class(), FailureClass::ResultInvalid);
        // The service answered, so the breaker counts it as alive.
        assert!(e.answered && e.proves_alive());
    }
}
