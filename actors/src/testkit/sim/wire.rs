//! What a simulated upstream sends ([`Sent`]) and what a transport reads of it ([`Wire`]).
//!
//! The fault process decides what each attempt's upstream sends: an answer, a stream cut short,
//! a status with its hint, or a head and then nothing. [`run_seed`](super::run_seed) reads that
//! as the fault process meant it ([`meant`]). [`run_seed_through`](super::run_seed_through)
//! hands it to a [`Wire`] of the caller's instead: the `polygateway` crate writes each answer in a
//! provider's dialect and reads it back through its production decoders (the SSE framer, the
//! dialect's exchange, its stall clock, its error classifier). What the runtime then governs is
//! what the decoders said, and a decoder that reads an answer otherwise than it was meant is a
//! violation of the seed.

use std::time::Duration;

use crate::outcome::{FailureClass, SourceReason};

/// What an upstream sends for one attempt.
///
/// ```
/// use polygateway_actors::testkit::sim::{meant, Sent};
/// // A stream that stops on a tool call's first piece: a cut no continuation may take up.
/// let read = meant(Sent::Cut { pieces: 2, tool_call: true }, true);
/// assert!(read.tool_call);
/// assert_eq!(read.failure.unwrap().cut, Some(true));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// A complete answer: `pieces` pieces of text (at least one), then the end marker.
    Answer {
        /// Pieces of text, each its own event.
        pieces: u64,
    },
    /// A stream that stops after `pieces` pieces without its end marker (the connection
    /// dropped); the last piece is a tool call's first when `tool_call`.
    Cut {
        /// Pieces sent before the cut (0: nothing but the head).
        pieces: u64,
        /// The last piece is a tool call's first.
        tool_call: bool,
    },
    /// The answer's head, then nothing: the stall watchdog ends the attempt at its deadline.
    Silent,
    /// Pushback (429), with its Retry-After.
    RateLimited {
        /// The hint, in whole seconds, as `Retry-After` is written.
        retry_after: Option<Duration>,
    },
    /// A source too busy to serve: a fast 5xx without a hint (Anthropic's `529
    /// overloaded_error`).
    Overloaded,
    /// A transient server failure (503), with its Retry-After.
    Unavailable {
        /// The hint, in whole seconds, as `Retry-After` is written.
        retry_after: Option<Duration>,
    },
    /// The key is refused (401; Gemini says 400 `API_KEY_INVALID`).
    KeyRefused,
    /// The request is refused (400).
    Rejected,
}

/// What a transport read of what was sent: the pieces it handed to the caller's stream and its
/// verdict.
///
/// ```
/// use polygateway_actors::testkit::sim::{meant, Read, Sent};
/// // An answer's pieces reach a caller that streams; one that does not gets the answer whole.
/// let answer = Sent::Answer { pieces: 3 };
/// assert_eq!(meant(answer, true), Read { pieces: 3, tool_call: false, failure: None });
/// assert_eq!(meant(answer, false).pieces, 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Read {
    /// Pieces handed to the caller's stream (none when the call does not stream).
    pub pieces: u64,
    /// The last piece handed on was a tool call's first.
    pub tool_call: bool,
    /// The attempt's failure, as the transport classified it; `None` for an answer.
    pub failure: Option<Failure>,
}

/// A failed attempt, as a transport classified it.
///
/// ```
/// use polygateway_actors::testkit::sim::{meant, Sent};
/// use polygateway_actors::{FailureClass, SourceReason};
/// // A refused key is a dead source, not pushback and not a cut.
/// let failure = meant(Sent::KeyRefused, false).failure.unwrap();
/// assert_eq!((failure.class, failure.reason), (FailureClass::SourceDead, SourceReason::SourceDead));
/// assert!(!failure.rate_limited && failure.cut.is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Failure {
    /// Its class.
    pub class: FailureClass,
    /// The per-source reason.
    pub reason: SourceReason,
    /// Pushback (a 429), not a failure of the source.
    pub rate_limited: bool,
    /// The upstream's Retry-After.
    pub retry_after: Option<Duration>,
    /// A stream cut after content, which a continuation may take up: `Some(true)` when its last
    /// piece was a tool call's first.
    pub cut: Option<bool>,
}

/// One attempt, as the wire sees it: whose it is, when its answer arrives, and who reads it.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::testkit::sim::Attempt;
/// // Source 1's attempt, 3 s into the seed, answered 250 ms later under a 2 s stall limit, for
/// // a caller that streams.
/// let attempt = Attempt {
///     source: 1,
///     streaming: true,
///     started: Duration::from_secs(3),
///     after: Duration::from_millis(250),
///     timeout: Duration::from_secs(2),
/// };
/// assert!(attempt.after < attempt.timeout, "the answer comes before the watchdog");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// The source (its index in the seed's scope).
    pub source: usize,
    /// The caller streams: the answer's pieces are handed to it.
    pub streaming: bool,
    /// When the attempt started, into the seed (virtual time).
    pub started: Duration,
    /// How long after it the answer arrives.
    pub after: Duration,
    /// The source's stall limits: before the first piece, between pieces and in all.
    pub timeout: Duration,
}

/// A transport's reading of what simulated upstreams send.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::testkit::sim::{meant, Attempt, Read, Sent, Wire};
/// /// Reads a 429 without its Retry-After: not what it meant.
/// #[derive(Debug)]
/// struct HintBlind;
/// impl Wire for HintBlind {
///     fn read(&self, sent: Sent, attempt: &Attempt) -> Read {
///         match sent {
///             Sent::RateLimited { .. } => meant(Sent::RateLimited { retry_after: None }, attempt.streaming),
///             other => meant(other, attempt.streaming),
///         }
///     }
/// }
/// let pushback = Sent::RateLimited { retry_after: Some(Duration::from_secs(2)) };
/// let attempt = Attempt {
///     source: 0,
///     streaming: true,
///     started: Duration::ZERO,
///     after: Duration::from_millis(30),
///     timeout: Duration::from_secs(5),
/// };
/// assert_ne!(HintBlind.read(pushback, &attempt), meant(pushback, true));
/// ```
pub trait Wire: Send + Sync + std::fmt::Debug {
    /// What the attempt's source's transport reads of `sent`.
    fn read(&self, sent: Sent, attempt: &Attempt) -> Read;
}

/// What `sent` means for a caller that streams when `streaming`: what a transport that reads it
/// right reads, what [`run_seed`](super::run_seed) reads, and what every [`Wire`] must agree with.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::testkit::sim::{meant, Sent};
/// use polygateway_actors::SourceReason;
/// let hint = Some(Duration::from_millis(1_500));
/// let failure = meant(Sent::RateLimited { retry_after: hint }, true).failure.unwrap();
/// assert!(failure.rate_limited);
/// assert_eq!((failure.reason, failure.retry_after), (SourceReason::RateLimited, hint));
/// // A stream cut after content is one a continuation may take up; its pieces were handed on
/// // only to a caller that streams.
/// let cut = Sent::Cut { pieces: 3, tool_call: false };
/// assert_eq!((meant(cut, true).pieces, meant(cut, true).failure.unwrap().cut), (3, Some(false)));
/// assert_eq!(meant(cut, false).pieces, 0);
/// ```
pub fn meant(sent: Sent, streaming: bool) -> Read {
    let handed = |pieces: u64| if streaming { pieces } else { 0 };
    let failed = |class, reason, rate_limited, retry_after| Read {
        pieces: 0,
        tool_call: false,
        failure: Some(Failure {
            class,
            reason,
            rate_limited,
            retry_after,
            cut: None,
        }),
    };
    let transient = FailureClass::Transient;
    match sent {
        Sent::Answer { pieces } => Read {
            pieces: handed(pieces),
            tool_call: false,
            failure: None,
        },
        Sent::Cut { pieces, tool_call } => Read {
            pieces: handed(pieces),
            tool_call: tool_call && handed(pieces) > 0,
            failure: Some(Failure {
                class: transient,
                reason: SourceReason::NetworkError,
                rate_limited: false,
                retry_after: None,
                cut: (pieces > 0).then_some(tool_call),
            }),
        },
        Sent::Silent => failed(transient, SourceReason::Timeout, false, None),
        Sent::RateLimited { retry_after } => {
            failed(transient, SourceReason::RateLimited, true, retry_after)
        }
        Sent::Overloaded => failed(transient, SourceReason::ServerError, false, None),
        Sent::Unavailable { retry_after } => {
            failed(transient, SourceReason::ServerError, false, retry_after)
        }
        Sent::KeyRefused => failed(
            FailureClass::SourceDead,
            SourceReason::SourceDead,
            false,
            None,
        ),
        Sent::Rejected => failed(
            FailureClass::RequestRejected,
            SourceReason::NetworkError,
            false,
            None,
        ),
    }
}

/// The wire of [`run_seed`](super::run_seed): every answer read as it was meant.
#[derive(Debug)]
pub(super) struct Meant;

impl Wire for Meant {
    fn read(&self, sent: Sent, attempt: &Attempt) -> Read {
        meant(sent, attempt.streaming)
    }
}
