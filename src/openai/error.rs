//! A [`GatewayError`] as the HTTP status and OpenAI error object a caller gets
//! (docs/behaviour.md §12.3): the server answers it, a batch job writes it into the item's
//! output line. Without HTTP types, so the batch runner needs no `server` feature.

use serde_json::{json, Value};

use crate::error::GatewayError;
use crate::UnavailableReason;

/// One error as a caller sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ErrorShape {
    pub(crate) status: u16,
    /// OpenAI's `type`.
    pub(crate) kind: &'static str,
    /// OpenAI's `code`.
    pub(crate) code: &'static str,
    pub(crate) message: String,
    pub(crate) param: Option<&'static str>,
    /// Seconds for `Retry-After` (429 and 503).
    pub(crate) retry_after_s: Option<f64>,
    /// The spend budget that refused (`budget_exhausted`): the server puts it in headers.
    pub(crate) budget: Option<Box<crate::BudgetStatus>>,
}

impl ErrorShape {
    pub(crate) fn new(
        status: u16,
        kind: &'static str,
        code: &'static str,
        message: String,
    ) -> Self {
        Self {
            status,
            kind,
            code,
            message,
            param: None,
            retry_after_s: None,
            budget: None,
        }
    }

    /// A 400 `invalid_request_error` about `param`.
    pub(crate) fn bad_request(message: impl Into<String>, param: Option<&'static str>) -> Self {
        let mut e = Self::new(
            400,
            "invalid_request_error",
            "invalid_request",
            message.into(),
        );
        e.param = param;
        e
    }

    /// OpenAI's error object: `{"error": {"message", "type", "param", "code"}}` (also the payload
    /// of an SSE error frame).
    pub(crate) fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

impl From<&GatewayError> for ErrorShape {
    fn from(e: &GatewayError) -> Self {
        let message = e.to_string();
        match e {
            // The caller's own deadline (docs/behaviour.md §5.7): a timeout, not the scope's
            // weather, so 504 and no Retry-After (the same deadline would be missed again).
            GatewayError::Unavailable(u) if u.reason == UnavailableReason::DeadlineExceeded => {
                Self::new(504, "timeout_error", "deadline_exceeded", message)
            }
            GatewayError::Unavailable(u) if u.reason == UnavailableReason::BudgetExhausted => {
                // OpenAI's own answer to a spent quota: 429 `insufficient_quota`.
                let mut out = Self::new(429, "insufficient_quota", u.reason.as_str(), message);
                out.retry_after_s = Some(u.retry_after_s);
                out.budget = u.budget.clone().map(Box::new);
                out
            }
            GatewayError::Unavailable(u) => {
                let quota = u.reason == UnavailableReason::QuotaExhausted;
                let mut out = Self::new(
                    if quota { 429 } else { 503 },
                    if quota {
                        "rate_limit_error"
                    } else {
                        "service_unavailable"
                    },
                    u.reason.as_str(),
                    message,
                );
                out.retry_after_s = Some(u.retry_after_s);
                out
            }
            GatewayError::RequestRejected { body_text, .. } => Self::new(
                400,
                "invalid_request_error",
                "request_rejected",
                // The upstream's own words, when the summary in the message does not carry them.
                if body_text.is_empty() || message.contains(body_text.as_str()) {
                    message
                } else {
                    format!("{message}; upstream said: {body_text}")
                },
            ),
            GatewayError::InvalidInput(_) => {
                Self::new(400, "invalid_request_error", "invalid_input", message)
            }
            GatewayError::ResultInvalid { .. } | GatewayError::NoStructuredValue(_) => {
                Self::new(502, "upstream_error", "result_invalid", message)
            }
            GatewayError::StreamInterrupted { .. } => {
                Self::new(502, "upstream_error", "stream_interrupted", message)
            }
            GatewayError::SourceNotConfigured(_) => {
                Self::new(404, "invalid_request_error", "model_not_found", message)
            }
            GatewayError::Shutdown(_) => {
                let mut out = Self::new(503, "service_unavailable", "shutting_down", message);
                out.retry_after_s = Some(1.0);
                out
            }
            // A configuration problem is the operator's, not the caller's nor an internal
            // fault: the service is unavailable until it is fixed (the server refuses every
            // one it can find at start, docs/behaviour.md §12).
            GatewayError::Config(_) => {
                Self::new(503, "service_unavailable", "misconfigured", message)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_problem_is_unavailable_not_internal() {
        let shape = ErrorShape::from(&GatewayError::Config(crate::config::ConfigError::Assembly(
            "no price for model m".into(),
        )));
        assert_eq!(
            (shape.status, shape.kind, shape.code),
            (503, "service_unavailable", "misconfigured")
        );
        assert!(shape.message.contains("no price for model m"));
    }
}
