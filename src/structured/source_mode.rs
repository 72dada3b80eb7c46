//! The structured mode one source speaks, remembered (docs/behaviour.md §9.2, "a source that
//! rejects a mode").
//!
//! A source starts in its configured mode (`STRUCTURED_MODE`, else its provider's strongest).
//! When it refuses that mode — a 400/422 whose body names `response_format` or the mode itself —
//! the transport re-sends the same ask in the next weaker mode at once, and this record keeps the
//! weaker mode for every later ask to that source. The refusal is not a fault of the source: the
//! server is healthy, it only speaks less than it was told. Fallback is one-way for the life of
//! the gateway (a restart tries the configured mode again).

use std::sync::atomic::{AtomicU8, Ordering};

use super::StructuredMode;
use crate::error::TransportError;

/// One source's structured mode: configured, and current after any fallback.
#[derive(Debug)]
pub(crate) struct SourceMode {
    source: String,
    configured: StructuredMode,
    /// Index into [`StructuredMode::ALL`]; only ever grows (weaker).
    current: AtomicU8,
}

impl SourceMode {
    pub(crate) fn new(source: &str, configured: StructuredMode) -> Self {
        Self {
            source: source.to_string(),
            configured,
            current: AtomicU8::new(index(configured)),
        }
    }

    /// The mode the source was configured with.
    pub(crate) fn configured(&self) -> StructuredMode {
        self.configured
    }

    /// The mode the next ask is sent in.
    pub(crate) fn current(&self) -> StructuredMode {
        StructuredMode::ALL[usize::from(self.current.load(Ordering::Acquire))]
    }

    /// The source refused `rejected`: remember the next weaker mode and answer it (the mode to
    /// re-send in), or `None` when nothing weaker is left. Concurrent asks that were refused the
    /// same mode step down once between them, and the step is logged once.
    pub(crate) fn fall_back(&self, rejected: StructuredMode, why: &str) -> Option<StructuredMode> {
        let weaker = rejected.weaker()?;
        match self.current.compare_exchange(
            index(rejected),
            index(weaker),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                tracing::warn!(
                    source = %self.source,
                    from = rejected.as_str(),
                    to = weaker.as_str(),
                    reason = why,
                    "the source rejected its structured mode; falling back to a weaker one for \
                     this source (set STRUCTURED_MODE to make it permanent)"
                );
                Some(weaker)
            }
            // Another ask stepped down first: use where it got to.
            Err(now) => {
                let now = StructuredMode::ALL[usize::from(now)];
                (now > rejected).then_some(now)
            }
        }
    }
}

fn index(mode: StructuredMode) -> u8 {
    match mode {
        StructuredMode::JsonSchema => 0,
        StructuredMode::JsonObject => 1,
        StructuredMode::Prompt => 2,
    }
}

/// `true` when `error` is the source refusing the structured mode `sent`: a 400 or 422 (TGI
/// answers validation errors with 422) whose body names `response_format` or the mode's own
/// type (`json_schema`, `json_object`). Other request errors (a context overflow, a bad
/// parameter) are not, and fail the call as before. The prompt mode sends nothing to refuse.
pub(crate) fn refuses_mode(error: &TransportError, sent: StructuredMode) -> bool {
    if sent == StructuredMode::Prompt || !matches!(error.status, Some(400 | 422)) {
        return false;
    }
    let body = error.body_text.to_ascii_lowercase();
    // Anthropic carries the schema mode as `output_config.format` (structured outputs, which
    // older models refuse) and the object mode as a forced tool, which it refuses beside
    // extended thinking ("… when tool_choice forces tool use").
    [
        "response_format",
        sent.as_str(),
        "tool_choice",
        "output_config",
    ]
    .iter()
    .any(|needle| body.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use polygateway_actors::{FailureClass, SourceReason};

    fn rejected(status: u16, body: &str) -> TransportError {
        let mut e = TransportError::new(
            FailureClass::RequestRejected,
            SourceReason::NetworkError,
            format!("HTTP {status} request rejected: {body}"),
        );
        e.status = Some(status);
        e.body_text = body.to_string();
        e
    }

    #[test]
    fn only_a_refusal_naming_the_format_is_a_mode_refusal() {
        let schema = StructuredMode::JsonSchema;
        assert!(refuses_mode(
            &rejected(400, "unsupported response_format type"),
            schema
        ));
        assert!(refuses_mode(
            &rejected(400, "'Response_Format.type' must be 'json_schema'"),
            StructuredMode::JsonObject
        ));
        assert!(refuses_mode(
            &rejected(422, "json_schema not supported"),
            schema
        ));
        // A different complaint, another status, or nothing sent to refuse: not a refusal.
        assert!(!refuses_mode(
            &rejected(400, "maximum context length exceeded"),
            schema
        ));
        assert!(!refuses_mode(
            &rejected(500, "response_format crashed"),
            schema
        ));
        assert!(!refuses_mode(
            &rejected(400, "response_format"),
            StructuredMode::Prompt
        ));
    }

    #[test]
    fn fallback_steps_down_once_and_is_remembered() {
        let mode = SourceMode::new("vllm_1", StructuredMode::JsonSchema);
        assert_eq!(mode.current(), StructuredMode::JsonSchema);
        assert_eq!(
            mode.fall_back(StructuredMode::JsonSchema, "400"),
            Some(StructuredMode::JsonObject)
        );
        // A concurrent ask refused the same mode: it uses the step already taken.
        assert_eq!(
            mode.fall_back(StructuredMode::JsonSchema, "400"),
            Some(StructuredMode::JsonObject)
        );
        assert_eq!(mode.current(), StructuredMode::JsonObject);
        assert_eq!(
            mode.fall_back(StructuredMode::JsonObject, "400"),
            Some(StructuredMode::Prompt)
        );
        assert_eq!(mode.fall_back(StructuredMode::Prompt, "400"), None);
        assert_eq!(
            (mode.configured(), mode.current()),
            (StructuredMode::JsonSchema, StructuredMode::Prompt)
        );
    }
}
