//! Every error the server answers, as an HTTP status and OpenAI's error body
//! (`{"error": {"message", "type", "param", "code"}}`), so an unchanged OpenAI SDK raises its
//! usual exception class. The mapping from [`GatewayError`] is docs/behaviour.md §12.3. Not for
//! errors inside a stream that has started: those are an SSE `error` frame ([`super::sse`]).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::GatewayError;
use crate::openai::error::ErrorShape;

/// One error answer: the shape shared with batch output lines ([`ErrorShape`]), answered over
/// HTTP. Only the server needs the conversion to a response, so it lives here.
#[derive(Debug)]
pub(crate) struct ApiError(pub(crate) ErrorShape);

impl std::ops::Deref for ApiError {
    type Target = ErrorShape;
    fn deref(&self) -> &ErrorShape {
        &self.0
    }
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, code: &'static str, message: String) -> Self {
        Self(ErrorShape::new(status.as_u16(), kind, code, message))
    }

    /// The HTTP status (an out-of-range code in a shape is a server error).
    pub(crate) fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.0.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    pub(crate) fn missing_key() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "invalid_api_key",
            "no API key: send `Authorization: Bearer <virtual key>`".into(),
        )
    }

    pub(crate) fn unknown_key() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "invalid_api_key",
            "the API key is not a configured virtual key".into(),
        )
    }

    /// A key without the `admin` scope asked for the status page's operator data.
    pub(crate) fn admin_required(key: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            "admin_required",
            format!("key {key} has no `admin` scope: the status data needs an admin key"),
        )
    }

    pub(crate) fn forbidden_scope(key: &str, scope: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "permission_error",
            "scope_forbidden",
            format!("key {key} may not use scope {scope}"),
        )
    }

    pub(crate) fn unknown_model(model: &str, served: &[String]) -> Self {
        let mut e = Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "model_not_found",
            format!(
                "model {model:?} is not served here (served: {}; see GET /v1/models)",
                served.join(", ")
            ),
        );
        e.0.param = Some("model");
        e
    }

    /// A path (or method) the server does not serve.
    pub(crate) fn not_found(path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "unknown_url",
            format!("no route {path} here (see docs/behaviour.md §12)"),
        )
    }

    pub(crate) fn bad_request(message: impl Into<String>, param: Option<&'static str>) -> Self {
        ErrorShape::bad_request(message, param).into()
    }

    pub(crate) fn key_limited(key: &str, gate: &str, retry_after_s: f64) -> Self {
        let mut e = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "key_rate_limited",
            format!("key {key} reached its {gate} limit; retry after {retry_after_s:.1}s"),
        );
        e.0.retry_after_s = Some(retry_after_s);
        e
    }

    pub(crate) fn governance_down(detail: &str) -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "governance_backend_down",
            format!("the limiter backend is unavailable ({detail}); nothing was sent upstream"),
        );
        e.0.retry_after_s = Some(5.0);
        e
    }

    pub(crate) fn timeout(after: std::time::Duration) -> Self {
        Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "timeout_error",
            "request_timeout",
            format!(
                "the request ran longer than PGW_SERVER_REQUEST_TIMEOUT_S ({:.0}s) and was cancelled",
                after.as_secs_f64()
            ),
        )
    }
}

impl From<ErrorShape> for ApiError {
    fn from(e: ErrorShape) -> Self {
        Self(e)
    }
}

/// The mapping of docs/behaviour.md §12.3, shared with batch output lines ([`ErrorShape`]).
impl From<GatewayError> for ApiError {
    fn from(e: GatewayError) -> Self {
        ErrorShape::from(&e).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after_s {
            let secs = crate::error::retry_after_header_secs(s);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(b) = &self.budget {
            let headers = response.headers_mut();
            // Amounts in the pricing table's currency, to the micro-unit the gate counts in.
            let amount = |v: f64| HeaderValue::try_from(format!("{v:.6}")).ok();
            if let Ok(name) = HeaderValue::try_from(b.name.as_str()) {
                headers.insert(BUDGET_NAME, name);
            }
            if let Some(v) = amount(b.limit) {
                headers.insert(BUDGET_LIMIT, v);
            }
            if let Some(v) = amount(b.remaining) {
                headers.insert(BUDGET_REMAINING, v);
            }
            let reset = b.resets_in.as_secs() + u64::from(b.resets_in.subsec_nanos() > 0);
            headers.insert(BUDGET_RESET_S, HeaderValue::from(reset));
        }
        response
    }
}

/// Which spend budget refused a `budget_exhausted` answer (`scope:…`, `tenant:…`, `vkey:…`).
pub(crate) const BUDGET_NAME: &str = "x-pgw-budget-name";
/// Its limit per window, in the pricing table's currency.
pub(crate) const BUDGET_LIMIT: &str = "x-pgw-budget-limit";
/// What is left of it in this window (less than the refused call's estimate).
pub(crate) const BUDGET_REMAINING: &str = "x-pgw-budget-remaining";
/// Whole seconds (rounded up) until its window resets.
pub(crate) const BUDGET_RESET_S: &str = "x-pgw-budget-reset-s";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Unavailable, UnavailableKind};
    use crate::UnavailableReason;

    fn unavailable(reason: UnavailableReason, retry_after_s: f64) -> GatewayError {
        GatewayError::Unavailable(Box::new(Unavailable {
            kind: UnavailableKind::AllSourcesExhausted,
            scope: "LLM".into(),
            reason,
            retry_after_s,
            per_source_reasons: Default::default(),
            detail: String::new(),
            budget: None,
        }))
    }

    #[test]
    fn an_exhausted_budget_is_429_insufficient_quota_with_its_numbers_in_headers() {
        let status = crate::BudgetStatus::new(
            "tenant:acme",
            5_000_000,
            4_999_000,
            "day".into(),
            std::time::Duration::from_millis(3_600_500),
        );
        let GatewayError::Unavailable(mut u) =
            unavailable(UnavailableReason::BudgetExhausted, 3_600.5)
        else {
            unreachable!()
        };
        u.budget = Some(status);
        let r = ApiError::from(GatewayError::Unavailable(u)).into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        let h = r.headers();
        assert_eq!(h[header::RETRY_AFTER], "3601");
        assert_eq!(h[BUDGET_NAME], "tenant:acme");
        assert_eq!(h[BUDGET_LIMIT], "5.000000");
        assert_eq!(h[BUDGET_REMAINING], "0.001000");
        assert_eq!(h[BUDGET_RESET_S], "3601");
    }

    #[test]
    fn unavailability_is_503_and_quota_is_429_with_retry_after() {
        let r = ApiError::from(unavailable(UnavailableReason::CircuitOpen, 2.2)).into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[header::RETRY_AFTER], "3");
        let r = ApiError::from(unavailable(UnavailableReason::QuotaExhausted, 0.0)).into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
    }

    #[test]
    fn a_missed_deadline_is_504_without_retry_after() {
        let r =
            ApiError::from(unavailable(UnavailableReason::DeadlineExceeded, 0.0)).into_response();
        assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
        assert!(r.headers().get(header::RETRY_AFTER).is_none());
        let e = ApiError::from(unavailable(UnavailableReason::DeadlineExceeded, 0.0));
        assert_eq!(e.0.code, "deadline_exceeded");
        assert_eq!(e.0.kind, "timeout_error");
    }

    #[test]
    fn rejected_is_400_and_invalid_is_502() {
        let rejected = GatewayError::RequestRejected {
            message: "HTTP 400".into(),
            body_text: "context too long".into(),
        };
        let e = ApiError::from(rejected);
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert!(
            e.message.contains("upstream said: context too long"),
            "{}",
            e.message
        );
        let invalid = GatewayError::ResultInvalid {
            message: "x".into(),
            details: Box::default(),
        };
        assert_eq!(ApiError::from(invalid).status(), StatusCode::BAD_GATEWAY);
    }
}
