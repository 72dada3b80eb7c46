//! Mid-stream continuation on another source (docs/behaviour.md §5.10): a streamed text answer
//! cut after content reached the caller (an abrupt close, the stall watchdog, an `error` event)
//! is continued on another source that takes a prefill — the conversation plus the delivered
//! text as the final assistant turn — and the continuation is spliced into the same stream.
//!
//! This file holds the decisions, sans-I/O: whether a cut may be continued ([`decide`]: never
//! after a tool call, thinking or a refusal had begun, never for structured output, never past
//! the call's deadline), and the scope's counts of how cuts ended ([`Continuing`]). The
//! continuation attempt itself is the driver's (`driver::continue_cut`): selected among the
//! other sources that take a prefill and admitted like any attempt, so it holds what any
//! attempt holds and releases it the same way when the caller goes away.

use std::time::Instant;

use crate::ports::transport::StreamCut;

use super::labels::CONTINUATION_OUTCOMES;
use super::metrics::CONTINUATIONS_TOTAL;
use super::outcome_counts::OutcomeCounts;

/// How a scope continues cut streams (`{SCOPE}__CONTINUE__*`; off by default).
///
/// ```
/// use polygateway_actors::runtime::{ContinueConfig, ScopeConfig};
/// let mut config = ScopeConfig::new("LLM");
/// assert!(!config.continuation.enabled); // opt-in
/// config.continuation = ContinueConfig { enabled: true };
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContinueConfig {
    /// Continue cut streams at all (`CONTINUE__ENABLED`).
    pub enabled: bool,
}

/// How a cut stream ended, or why it was not continued: the `outcome` label of
/// `pgw_continuations_total`, indexed like [`CONTINUATION_OUTCOMES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContinueOutcome {
    /// Another source continued it; the caller got one answer.
    Continued = 0,
    /// The continuation failed too: the call ends as a cut stream does without continuation.
    Failed = 1,
    /// A tool call had begun: a text prefix cannot carry its arguments on.
    NotEligibleToolCall = 2,
    /// Thinking (reasoning) had begun: its block cannot be handed to another source.
    NotEligibleThinking = 3,
    /// A refusal had begun.
    NotEligibleRefusal = 4,
    /// A structured-output call: its text must parse as a whole, from one source.
    NotEligibleStructured = 5,
    /// No other source that takes a prefill was eligible, or admission refused it.
    NoSource = 6,
    /// The call's deadline had passed.
    Deadline = 7,
}

/// Whether `cut` may be continued at `now`. A tool call is checked first: a continuation is
/// never spliced after a tool-call delta, whatever else the answer had begun.
pub(crate) fn decide<R>(
    cut: &StreamCut<R>,
    deadline: Option<Instant>,
    now: Instant,
) -> Result<(), ContinueOutcome> {
    if cut.tool_call {
        return Err(ContinueOutcome::NotEligibleToolCall);
    }
    if cut.thinking {
        return Err(ContinueOutcome::NotEligibleThinking);
    }
    if cut.refusal {
        return Err(ContinueOutcome::NotEligibleRefusal);
    }
    if cut.structured {
        return Err(ContinueOutcome::NotEligibleStructured);
    }
    if deadline.is_some_and(|d| now >= d) {
        return Err(ContinueOutcome::Deadline);
    }
    Ok(())
}

/// A scope's continuation of cut streams: its counters by outcome.
#[derive(Debug)]
pub(crate) struct Continuing {
    outcomes: OutcomeCounts<{ CONTINUATION_OUTCOMES.len() }>,
}

impl Continuing {
    /// The continuation of scope `scope`, or `None` when it is off.
    pub(crate) fn of(scope: &str, config: &ContinueConfig) -> Option<Self> {
        config.enabled.then(|| Self {
            outcomes: OutcomeCounts::new(CONTINUATIONS_TOTAL, scope, &CONTINUATION_OUTCOMES),
        })
    }

    pub(crate) fn count(&self, outcome: ContinueOutcome) {
        self.outcomes.add(outcome as usize);
    }

    /// How many cut streams ended with each outcome.
    pub(crate) fn counts(&self) -> [(&'static str, u64); CONTINUATION_OUTCOMES.len()] {
        self.outcomes.counts()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn text_cut_in_time_is_continued() {
        let now = Instant::now();
        assert_eq!(decide(&StreamCut::text(()), None, now), Ok(()));
        let later = Some(now + Duration::from_secs(1));
        assert_eq!(decide(&StreamCut::text(()), later, now), Ok(()));
    }

    #[test]
    fn a_tool_call_is_never_continued_whatever_else_began() {
        let now = Instant::now();
        let cut = StreamCut {
            tool_call: true,
            thinking: true,
            refusal: true,
            structured: true,
            request: (),
        };
        assert_eq!(
            decide(&cut, Some(now), now),
            Err(ContinueOutcome::NotEligibleToolCall)
        );
    }

    #[test]
    fn thinking_refusal_and_structured_calls_are_not_continued() {
        let now = Instant::now();
        let thinking = StreamCut {
            thinking: true,
            structured: true,
            ..StreamCut::text(())
        };
        assert_eq!(
            decide(&thinking, None, now),
            Err(ContinueOutcome::NotEligibleThinking)
        );
        let refusal = StreamCut {
            refusal: true,
            ..StreamCut::text(())
        };
        assert_eq!(
            decide(&refusal, None, now),
            Err(ContinueOutcome::NotEligibleRefusal)
        );
        let structured = StreamCut {
            structured: true,
            ..StreamCut::text(())
        };
        assert_eq!(
            decide(&structured, None, now),
            Err(ContinueOutcome::NotEligibleStructured)
        );
    }

    #[test]
    fn no_continuation_once_the_deadline_passed() {
        let now = Instant::now();
        assert_eq!(
            decide(&StreamCut::text(()), Some(now), now),
            Err(ContinueOutcome::Deadline)
        );
        let earlier = now.checked_sub(Duration::from_millis(1));
        assert_eq!(
            decide(&StreamCut::text(()), earlier, now),
            Err(ContinueOutcome::Deadline)
        );
    }

    #[test]
    fn counts_follow_the_outcome_vocabulary() {
        assert!(Continuing::of("LLM", &ContinueConfig::default()).is_none());
        let continuing = Continuing::of("LLM", &ContinueConfig { enabled: true }).unwrap();
        continuing.count(ContinueOutcome::Continued);
        continuing.count(ContinueOutcome::NotEligibleToolCall);
        continuing.count(ContinueOutcome::NotEligibleToolCall);
        let counts = continuing.counts();
        assert_eq!(counts[0], ("continued", 1));
        assert_eq!(counts[2], ("not_eligible_tool_call", 2));
        for (i, (label, _)) in counts.iter().enumerate() {
            assert_eq!(*label, CONTINUATION_OUTCOMES[i]);
        }
        assert_eq!(
            CONTINUATION_OUTCOMES[ContinueOutcome::Deadline as usize],
            "deadline"
        );
    }
}
