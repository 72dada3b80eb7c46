//! What one attempt tells the governance about its source.
//!
//! The runtime never looks at status codes or bodies (docs/behaviour.md §10.4): transports classify their own
//! errors into these classes, and every policy (retry, breaker, health, pacer) reads only this.

use std::time::Duration;

/// The four failure classes of docs/behaviour.md §6.
///
/// ```
/// use polygateway_actors::FailureClass;
/// assert_eq!(FailureClass::Transient.as_str(), "Transient");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// Timeout, 5xx, 429, network error, malformed or truncated stream, empty completion.
    Transient,
    /// 401, 403, 429 with `insufficient_quota`: the source cannot serve anything now.
    SourceDead,
    /// 400 or a local rejection: the request itself is wrong; retrying elsewhere will not help.
    RequestRejected,
    /// The call succeeded but its content is unusable.
    ResultInvalid,
}

impl FailureClass {
    /// The class name as it appears in telemetry (`Class: message`).
    ///
    /// ```
    /// use polygateway_actors::FailureClass;
    /// // Telemetry renders an attempt error as `Class: message`.
    /// let line = format!("{}: {}", FailureClass::SourceDead.as_str(), "HTTP 401");
    /// assert_eq!(line, "SourceDead: HTTP 401");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Transient => "Transient",
            FailureClass::SourceDead => "SourceDead",
            FailureClass::RequestRejected => "RequestRejected",
            FailureClass::ResultInvalid => "ResultInvalid",
        }
    }
}

/// Why a source could not serve, as reported in `per_source_reasons` (docs/behaviour.md §6).
///
/// ```
/// use polygateway_actors::SourceReason;
/// // Sources skipped without an attempt are told apart from sources whose attempt failed.
/// let skipped = |r: SourceReason| matches!(r, SourceReason::CircuitOpen | SourceReason::Cooldown);
/// assert!(skipped(SourceReason::Cooldown));
/// assert!(!skipped(SourceReason::Timeout));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceReason {
    /// No usable answer arrived over the network: connection refused/reset, malformed or
    /// truncated stream, empty completion (the original library's `network_error`).
    NetworkError,
    /// The source answered with a 5xx (or another status no rule expects): it is reachable but
    /// failing, which the network reason would hide.
    ServerError,
    /// Connect, TTFT, inter-token or total deadline.
    Timeout,
    /// 429 pushback.
    RateLimited,
    /// 401/403/insufficient quota.
    SourceDead,
    /// The breaker refused the source.
    CircuitOpen,
    /// The local cooldown memo skipped the source.
    Cooldown,
}

impl SourceReason {
    /// The wire name used in errors and telemetry.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use polygateway_actors::SourceReason;
    /// let per_source = BTreeMap::from([
    ///     ("openai_1", SourceReason::RateLimited),
    ///     ("openai_2", SourceReason::CircuitOpen),
    /// ]);
    /// let shown: Vec<String> =
    ///     per_source.iter().map(|(s, r)| format!("{s}={}", r.as_str())).collect();
    /// assert_eq!(shown, ["openai_1=rate_limited", "openai_2=circuit_open"]);
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            SourceReason::NetworkError => "network_error",
            SourceReason::ServerError => "server_error",
            SourceReason::Timeout => "timeout",
            SourceReason::RateLimited => "rate_limited",
            SourceReason::SourceDead => "source_dead",
            SourceReason::CircuitOpen => "circuit_open",
            SourceReason::Cooldown => "cooldown",
        }
    }
}

/// How a transport error presents itself to governance. Implemented by every transport error.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::{Classify, FailureClass, SourceReason};
///
/// // A toy transport error carrying an HTTP status.
/// #[derive(Debug)]
/// struct Status(u16);
///
/// impl Classify for Status {
///     fn class(&self) -> FailureClass {
///         match self.0 {
///             401 | 403 => FailureClass::SourceDead,
///             400 => FailureClass::RequestRejected,
///             _ => FailureClass::Transient,
///         }
///     }
///     fn is_rate_limited(&self) -> bool {
///         self.0 == 429
///     }
///     fn retry_after(&self) -> Option<Duration> {
///         None
///     }
///     fn source_reason(&self) -> SourceReason {
///         match self.0 {
///             401 | 403 => SourceReason::SourceDead,
///             429 => SourceReason::RateLimited,
///             _ => SourceReason::NetworkError,
///         }
///     }
/// }
///
/// // The default `proves_alive`: a rejected request still shows the upstream is up.
/// assert!(Status(400).proves_alive());
/// assert!(!Status(503).proves_alive());
/// assert_eq!(Status(429).source_reason(), SourceReason::RateLimited);
/// ```
pub trait Classify {
    /// The class that drives retry, switching and the breaker.
    fn class(&self) -> FailureClass;
    /// `true` for a 429 that is pushback (not `insufficient_quota`): it burns no retry budget and
    /// counts in neither breaker channel.
    fn is_rate_limited(&self) -> bool;
    /// The upstream's `Retry-After` hint (seconds form only).
    fn retry_after(&self) -> Option<Duration>;
    /// Rate-limit headers the upstream sent with this refusal (none by default), an input of
    /// the pacer.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use polygateway_actors::policy::pacer::RateLimitHint;
    /// use polygateway_actors::{Classify, FailureClass, SourceReason};
    /// struct Refused(RateLimitHint);
    /// impl Classify for Refused {
    ///     fn class(&self) -> FailureClass { FailureClass::Transient }
    ///     fn is_rate_limited(&self) -> bool { true }
    ///     fn retry_after(&self) -> Option<Duration> { Some(Duration::from_secs(1)) }
    ///     fn source_reason(&self) -> SourceReason { SourceReason::RateLimited }
    ///     fn rate_limit_hint(&self) -> Option<RateLimitHint> { Some(self.0) }
    /// }
    /// let hint = RateLimitHint { remaining: Some(0), ..RateLimitHint::default() };
    /// assert_eq!(Refused(hint).rate_limit_hint().unwrap().remaining, Some(0));
    /// ```
    fn rate_limit_hint(&self) -> Option<RateLimitHint> {
        None
    }
    /// `true` when the upstream answered with a real non-2xx response that proves it is alive
    /// (e.g. 400): the breaker records a success.
    fn proves_alive(&self) -> bool {
        matches!(
            self.class(),
            FailureClass::RequestRejected | FailureClass::ResultInvalid
        )
    }
    /// The per-source reason reported when the call finally fails.
    fn source_reason(&self) -> SourceReason;
}

/// The verdict one finished attempt gives its source's breaker, health and pacer.
///
/// ```
/// use polygateway_actors::AttemptVerdict;
/// use polygateway_actors::policy::pacer::{AimdPacer, Pacer, PacerObservation};
/// let mut pacer = AimdPacer::new(0);
/// for v in [AttemptVerdict::AliveButUnusable, AttemptVerdict::RateLimited] {
///     pacer.observe(&PacerObservation::new(v, std::time::Instant::now()));
/// }
/// // The unusable answer is no pushback; the 429 halved the pacer.
/// assert_eq!(pacer.limit(), 4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptVerdict {
    /// Usable answer.
    Success,
    /// The service answered but the result was unusable, or it rejected the request: the breaker
    /// counts a success, health stays neutral.
    AliveButUnusable,
    /// 429 pushback: health bad, pacer cuts its limit, breaker untouched.
    RateLimited,
    /// Transient failure: health bad, breaker failure.
    Failure,
    /// Source dead: health bad, breaker force-opens.
    Dead,
}

impl AttemptVerdict {
    /// Derive the verdict of a failed attempt from its classified error.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use polygateway_actors::{AttemptVerdict, Classify, FailureClass, SourceReason};
    /// #[derive(Debug)]
    /// struct Failed { class: FailureClass, rate_limited: bool }
    /// # impl Classify for Failed {
    /// #     fn class(&self) -> FailureClass { self.class }
    /// #     fn is_rate_limited(&self) -> bool { self.rate_limited }
    /// #     fn retry_after(&self) -> Option<Duration> { None }
    /// #     fn source_reason(&self) -> SourceReason { SourceReason::NetworkError }
    /// # }
    /// let verdict =
    ///     |class, rate_limited| AttemptVerdict::of_error(&Failed { class, rate_limited });
    /// assert_eq!(verdict(FailureClass::Transient, true), AttemptVerdict::RateLimited);
    /// assert_eq!(verdict(FailureClass::Transient, false), AttemptVerdict::Failure);
    /// assert_eq!(verdict(FailureClass::SourceDead, false), AttemptVerdict::Dead);
    /// assert_eq!(verdict(FailureClass::RequestRejected, false), AttemptVerdict::AliveButUnusable);
    /// ```
    pub fn of_error<E: Classify + ?Sized>(error: &E) -> Self {
        if error.is_rate_limited() {
            return AttemptVerdict::RateLimited;
        }
        match error.class() {
            FailureClass::Transient => AttemptVerdict::Failure,
            FailureClass::SourceDead => AttemptVerdict::Dead,
            FailureClass::RequestRejected | FailureClass::ResultInvalid => {
                if error.proves_alive() {
                    AttemptVerdict::AliveButUnusable
                } else {
                    AttemptVerdict::Failure
                }
            }
        }
    }
}

/// Rate-limit headers an upstream sent with an answer (OpenAI's `x-ratelimit-*-requests`).
/// Each part is optional: providers send some, all or none of them.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::policy::pacer::RateLimitHint;
/// // `x-ratelimit-limit-requests: 1000`, `…-remaining-requests: 400`, `…-reset-requests: 600ms`:
/// let hint = RateLimitHint {
///     limit: Some(1000),
///     remaining: Some(400),
///     reset: Some(Duration::from_millis(600)),
/// };
/// // 600 spent requests come back in 600 ms: the adaptive pacer learns that the upstream refills
/// // 1,000 requests per second. A provider that sends none of them gives the empty hint.
/// assert_ne!(hint, RateLimitHint::default());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateLimitHint {
    /// `x-ratelimit-limit-requests`: the bucket's size.
    pub limit: Option<u64>,
    /// `x-ratelimit-remaining-requests`: requests left before 429.
    pub remaining: Option<u64>,
    /// `x-ratelimit-reset-requests`: time until the bucket is full again.
    pub reset: Option<Duration>,
}

impl RateLimitHint {
    /// The refill rate the headers imply (what the adaptive pacer learns from them): the spent
    /// part of the bucket (`limit − remaining`) comes back within `reset`. `None` unless all three
    /// are present and something is spent.
    pub(crate) fn refill_per_s(&self) -> Option<f64> {
        let (limit, remaining, reset) = (self.limit?, self.remaining?, self.reset?);
        (limit > remaining && !reset.is_zero())
            .then(|| (limit - remaining) as f64 / reset.as_secs_f64())
    }
}
