//! Translating the runtime's [`CallFailure`] into the caller-facing [`GatewayError`].

use polygateway_actors::runtime::{CallFailure, ScopeReason};

use crate::error::{
    GatewayError, InvalidResult, TransportError, Unavailable, UnavailableKind, UnavailableReason,
};

/// The unavailable family member and wire reason of a scope-level reason. `attempted` says
/// whether the call itself sent an attempt that failed: every breaker open *after* that (a dead
/// key on the only source opened it) means the call used up its sources — `AllSourcesExhausted`,
/// as the original library raises it; refused at the gate without an attempt, `CircuitOpenError`.
pub(crate) fn classify(
    reason: ScopeReason,
    attempted: bool,
) -> (UnavailableKind, UnavailableReason) {
    use UnavailableKind::AllSourcesExhausted as Exhausted;
    match reason {
        ScopeReason::CircuitOpen if attempted => (Exhausted, UnavailableReason::CircuitOpen),
        ScopeReason::CircuitOpen => (UnavailableKind::CircuitOpen, UnavailableReason::CircuitOpen),
        ScopeReason::GovernanceBackendDown => (
            UnavailableKind::GovernanceBackend,
            UnavailableReason::GovernanceBackendDown,
        ),
        ScopeReason::RetryExhausted => (Exhausted, UnavailableReason::RetryExhausted),
        ScopeReason::Stalled => (Exhausted, UnavailableReason::Stalled),
        ScopeReason::QuotaExhausted => (Exhausted, UnavailableReason::QuotaExhausted),
        ScopeReason::NoSources => (Exhausted, UnavailableReason::NoSources),
        ScopeReason::DeadlineExceeded => (Exhausted, UnavailableReason::DeadlineExceeded),
    }
}

/// The human detail of an unavailable call, each part once: what the runtime said (e.g.
/// `3 attempt(s) failed`), then the last attempt's error (what telemetry needs to tell a
/// cut-off stream from a refused connection).
pub(crate) fn detail_text(detail: &str, last_error: Option<&TransportError>) -> String {
    match last_error {
        None => detail.to_string(),
        Some(e) if detail.is_empty() => format!("last error: {}", e.message),
        Some(e) => format!("{detail}; last error: {}", e.message),
    }
}

/// Map a governed call's failure for the caller of scope `scope`.
pub(crate) fn to_gateway_error(scope: &str, failure: CallFailure<TransportError>) -> GatewayError {
    match failure {
        CallFailure::Unavailable {
            reason,
            retry_after,
            per_source,
            last_error,
            detail,
        } => {
            let (kind, reason) = classify(reason, last_error.is_some());
            let detail = detail_text(&detail, last_error.as_ref());
            // docs/behaviour.md §6: a backend outage always advises 5 s.
            let retry_after_s = if kind == UnavailableKind::GovernanceBackend {
                5.0
            } else {
                retry_after.as_secs_f64()
            };
            GatewayError::Unavailable(Box::new(Unavailable {
                kind,
                scope: scope.to_string(),
                reason,
                retry_after_s,
                budget: None,
                per_source_reasons: per_source
                    .into_iter()
                    .map(|(source, reason)| (source.to_string(), reason))
                    .collect(),
                detail,
            }))
        }
        CallFailure::Rejected(e) => GatewayError::RequestRejected {
            message: e.message,
            body_text: e.body_text,
        },
        CallFailure::Invalid(e) => GatewayError::ResultInvalid {
            message: e.message.clone(),
            details: Box::new(InvalidResult {
                raw_text: e.body_text,
                repair_error: None,
                validation_errors: Vec::new(),
            }),
        },
        CallFailure::StreamBroken { error, delivered } => GatewayError::StreamInterrupted {
            message: error.message,
            delivered,
        },
        CallFailure::Shutdown(reason) => GatewayError::Shutdown(reason),
    }
}
